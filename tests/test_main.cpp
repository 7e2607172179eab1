// The doctest runner. A crash prints a backtrace of the crashing thread (function names come from the
// executables' exported symbols, see -rdynamic in tests/CMakeLists.txt), so a CI log says where it happened.
#define DOCTEST_CONFIG_IMPLEMENT
#define DOCTEST_CONFIG_NO_POSIX_SIGNALS
#include <doctest/doctest.h>
#include <execinfo.h>
#include <unistd.h>

#include <csignal>

namespace {

void print_backtrace_and_die(int signal_number) {
  const char header[] = "\n*** test crashed; backtrace:\n";
  ssize_t ignored = write(STDERR_FILENO, header, sizeof(header) - 1);
  (void)ignored;
  void* frames[64];
  int count = backtrace(frames, 64);
  backtrace_symbols_fd(frames, count, STDERR_FILENO);
  std::signal(signal_number, SIG_DFL);
  std::raise(signal_number);
}

}  // namespace

int main(int argc, char** argv) {
  for (int signal_number : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) std::signal(signal_number, print_backtrace_and_die);
  doctest::Context context(argc, argv);
  return context.run();
}
