#include "common/error.h"

#include <cerrno>
#include <cstring>
#include <exception>

#include "common/interrupt.h"

namespace probekit {

bool is_disk_full_message(const std::string& message) {
  return message.find(std::strerror(ENOSPC)) != std::string::npos || message.find(std::strerror(EFBIG)) != std::string::npos ||
         message.find(std::strerror(EDQUOT)) != std::string::npos;
}

void rethrow_with_context(const std::string& context) {
  try {
    throw;
  } catch (const Interrupted&) {
    throw;  // not an error of the work in progress: it stops as asked
  } catch (const UsageError& e) {
    throw UsageError(context + ": " + e.what());
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(context + ": " + e.what());
  } catch (const std::exception& e) {
    throw std::runtime_error(context + ": " + e.what());
  }
}

}  // namespace probekit
