#!/usr/bin/env bash
# Starts N local processes of one command with the variables torchrun sets (RANK, WORLD_SIZE,
# LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT): data-parallel training on one machine.
#
#   scripts/launch.sh -n 2 [--port P] [--addr HOST] -- build/combiner-train --config ... [--set ...]
#
# Rank 0's output passes through unchanged (it alone logs, and its last lines are the results);
# every other rank's lines go to stderr prefixed "[rank i] ". When a rank fails, the others are
# stopped and the script exits with that rank's status. Without --port a free port is picked.
set -uo pipefail

usage() {
  echo "usage: $0 -n N [--port P] [--addr HOST] -- command [args...]" >&2
  exit 2
}

nproc_arg="" port="" addr=127.0.0.1
while [ $# -gt 0 ]; do
  case "$1" in
    -n | --nproc) [ $# -ge 2 ] || usage; nproc_arg=$2; shift 2 ;;
    --port) [ $# -ge 2 ] || usage; port=$2; shift 2 ;;
    --addr) [ $# -ge 2 ] || usage; addr=$2; shift 2 ;;
    --) shift; break ;;
    -h | --help) usage ;;
    *) echo "launch.sh: unknown option '$1'" >&2; usage ;;
  esac
done
[ $# -gt 0 ] || { echo "launch.sh: no command after --" >&2; usage; }
if ! [[ $nproc_arg =~ ^[1-9][0-9]*$ ]]; then
  echo "launch.sh: -n needs a number of processes >= 1, got '$nproc_arg'" >&2
  exit 2
fi
if [ -z "$port" ]; then
  # A port the kernel just handed out, so concurrent launches (ctest -j) do not collide.
  port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])' 2>/dev/null || echo 29500)
fi
if ! [[ $port =~ ^[0-9]+$ ]] || [ "$port" -lt 1 ] || [ "$port" -gt 65535 ]; then
  echo "launch.sh: --port needs a port number (1-65535), got '$port'" >&2
  exit 2
fi

export WORLD_SIZE=$nproc_arg LOCAL_WORLD_SIZE=$nproc_arg MASTER_ADDR=$addr MASTER_PORT=$port

# Every rank runs in a session (and process group) of its own, so stopping a rank also stops
# the filter that prefixes its output; this script forwards Ctrl-C to them.
pids=()
for ((rank = 0; rank < nproc_arg; rank++)); do
  if [ "$rank" -eq 0 ]; then
    RANK=0 LOCAL_RANK=0 setsid "$@" &
  else
    RANK=$rank LOCAL_RANK=$rank setsid bash -c \
      'set -o pipefail; "$@" 2>&1 | sed -u "s/^/[rank $RANK] /" >&2' launch "$@" &
  fi
  pids+=($!)
done

running() {
  local pid
  for pid in "${pids[@]}"; do
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && return 0
  done
  return 1
}

# TERM to every rank still running, KILL to those left after 5 s.
stop_all() {
  local pid
  for pid in "${pids[@]}"; do [ -n "$pid" ] && kill -TERM -- "-$pid" 2>/dev/null; done
  for _ in $(seq 50); do running || return 0; sleep 0.1; done
  for pid in "${pids[@]}"; do [ -n "$pid" ] && kill -KILL -- "-$pid" 2>/dev/null; done
}
trap 'echo "launch.sh: interrupted; stopping every rank" >&2; stop_all; exit 130' INT
trap 'echo "launch.sh: terminated; stopping every rank" >&2; stop_all; exit 143' TERM

status=0
for ((left = nproc_arg; left > 0; left--)); do
  live=()
  for pid in "${pids[@]}"; do [ -n "$pid" ] && live+=("$pid"); done
  finished=""
  wait -n -p finished "${live[@]}"
  rc=$?
  for ((rank = 0; rank < nproc_arg; rank++)); do
    [ "${pids[$rank]}" = "$finished" ] && break
  done
  pids[$rank]=""
  if [ "$rc" -ne 0 ]; then
    status=$rc
    echo "launch.sh: rank $rank exited with status $rc; stopping the other ranks" >&2
    # A bad config or environment fails every rank: give them 2 s to exit and say why themselves
    # before they are stopped (rank 0's message is the one without a prefix).
    for _ in $(seq 20); do running || break; sleep 0.1; done
    stop_all
    wait
    break
  fi
done
exit "$status"
