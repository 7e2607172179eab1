// Stopping long work from outside: a caller (the Python package on Ctrl-C, a tool that sets
// CommonOptions::interrupt_note on SIGINT or SIGTERM) requests an interruption, and the work stops at its next progress
// report or forward pass as it stops on an error, leaving what it wrote resumable (a capture's files go on with
// --resume). Other tools end on a signal. The request is the whole process's: every call running then stops.
#pragma once

#include <stdexcept>

namespace probekit {

/// Thrown at the first progress report or forward pass after request_interrupt().
class Interrupted : public std::runtime_error {
 public:
  Interrupted() : std::runtime_error("interrupted") {}
};

/// Asks running work to stop; safe from any thread and from a signal handler.
void request_interrupt();
/// Forgets a request (before new work starts).
void clear_interrupt();
/// Throws Interrupted when an interruption was requested.
void throw_if_interrupted();

}  // namespace probekit
