// CLI11's App and Option declared for the headers of the add_*_flags functions: only the files that declare flags include
// CLI11 itself, a header whose global validators cost seconds of compile time in every file that includes it.
#pragma once

namespace CLI {
class App;
class Option;
}  // namespace CLI
