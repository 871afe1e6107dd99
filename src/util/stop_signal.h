// SIGINT / SIGTERM as a request to stop cleanly: the first one sets a flag that the training
// loop reads after each step (it then checkpoints and exits); a second one ends the process at
// once with the conventional status 128 + signal.
#pragma once

namespace combiner::util {

// Installs the handlers for SIGINT and SIGTERM (idempotent) and clears any earlier request.
void install_stop_handlers();

// The signal number of the first request since install_stop_handlers(), or 0.
int stop_requested();

}  // namespace combiner::util
