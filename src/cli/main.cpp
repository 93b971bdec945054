// fp8lm: the command-line tool (cli/run.cpp).
#include "cli/commands.h"

int main(int argc, char** argv) {
  return fp8lm::cli::run(argc, argv);
}
