// Compiles the shared precompiled header (src/util/pch.h) once; every target reuses it.
