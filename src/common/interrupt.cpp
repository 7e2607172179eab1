#include "common/interrupt.h"

#include <atomic>

namespace probekit {

namespace {
std::atomic<bool> requested{false};
}  // namespace

void request_interrupt() { requested.store(true); }

void clear_interrupt() { requested.store(false); }

void throw_if_interrupted() {
  if (requested.load(std::memory_order_relaxed)) throw Interrupted();
}

}  // namespace probekit
