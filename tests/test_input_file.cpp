// The one way the program opens an input file (core/input_file.h): regular files only, a FIFO
// or a device refused before any open could block or read without end, errno's reason named,
// and whole-file reads bounded.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <climits>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/input_file.h"
#include "fp8lm/error.h"
#include "test_util.h"

namespace fp8lm {
namespace {
namespace fs = std::filesystem;

using test::fresh_dir;

void write(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

using test::error_of;

TEST(InputFile, ReadsARegularFileWhole) {
  const std::string dir = fresh_dir("fp8lm_input_regular");
  const std::string big(200000, 'x');  // past the first read's size hint, were it wrong
  write(dir + "/a.txt", big);
  EXPECT_EQ(read_input_file(dir + "/a.txt", "--file", 1 << 20), big);
  write(dir + "/empty", "");
  EXPECT_EQ(read_input_file(dir + "/empty", "--file", 16), "");
  fs::create_symlink(dir + "/a.txt", dir + "/link");  // a link to a file is that file
  EXPECT_EQ(read_input_file(dir + "/link", "", 1 << 20).size(), big.size());
}

TEST(InputFile, RefusesAFileLargerThanItsBound) {
  const std::string dir = fresh_dir("fp8lm_input_bound");
  write(dir + "/f", std::string(1025, 'x'));
  EXPECT_EQ(read_input_file(dir + "/f", "", 1025).size(), 1025u);  // exactly the bound is read
  const std::string msg = error_of([&] { read_input_file(dir + "/f", "config", 1024); });
  EXPECT_NE(msg.find("config " + dir + "/f: "), std::string::npos) << msg;
  EXPECT_NE(msg.find("1025 bytes"), std::string::npos) << msg;
  EXPECT_NE(msg.find("more than the 1 KiB"), std::string::npos) << msg;
}

TEST(InputFile, RefusesAFifoAtOnceWithoutBlocking) {
  const std::string dir = fresh_dir("fp8lm_input_fifo");
  const std::string fifo = dir + "/pipe";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  // No writer ever opens it: an open for reading would wait forever.
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(error_of([&] { read_input_file(fifo, "--file", 1024); }),
            "--file " + fifo + ": is a named pipe, not a file");
  EXPECT_EQ(error_of([&] { InputStream s(fifo, "corpus"); }),
            "corpus " + fifo + ": is a named pipe, not a file");
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
}

TEST(InputFile, RefusesADeviceADirectoryAndAMissingFile) {
  EXPECT_EQ(error_of([] { read_input_file("/dev/zero", "--file", 1024); }),
            "--file /dev/zero: is a device, not a file");
  const std::string dir = fresh_dir("fp8lm_input_kinds");
  EXPECT_EQ(error_of([&] { read_input_file(dir, "", 1024); }),
            dir + ": is a directory, not a file");
  // A link to a device is the device.
  fs::create_symlink("/dev/zero", dir + "/zero");
  EXPECT_EQ(error_of([&] { InputFile f(dir + "/zero", "latest"); }),
            "latest " + dir + "/zero: is a device, not a file");
  EXPECT_EQ(error_of([&] { InputFile f(dir + "/none", "--config"); }),
            "--config " + dir + "/none: cannot be read: No such file or directory");
  EXPECT_EQ(error_of([] { InputFile f("", "--init"); }), "--init '': an empty path names no file");
}

TEST(InputFile, NamesTheReasonWhenPermissionIsDenied) {
  const std::string dir = fresh_dir("fp8lm_input_denied");
  write(dir + "/secret", "x");
  fs::permissions(dir + "/secret", fs::perms::none);
  if (::access((dir + "/secret").c_str(), R_OK) == 0)
    GTEST_SKIP() << "this user (root?) reads a file of mode 000: no permission to deny";
  EXPECT_EQ(error_of([&] { read_input_file(dir + "/secret", "tokenizer", 1024); }),
            "tokenizer " + dir + "/secret: cannot be read: Permission denied");
}

TEST(InputFile, StreamsLinesOfALargeFile) {
  const std::string dir = fresh_dir("fp8lm_input_stream");
  std::string text;
  for (int i = 0; i < 20000; ++i) text += std::to_string(i) + "\n";  // several buffers
  write(dir + "/lines", text);
  InputStream in(dir + "/lines", "");
  int n = 0;
  for (std::string line; std::getline(in, line); ++n) ASSERT_EQ(line, std::to_string(n));
  EXPECT_EQ(n, 20000);
}

TEST(InputFile, ByteSizesReadAsPeopleWriteThem) {
  EXPECT_EQ(byte_size_text(512), "512 bytes");
  EXPECT_EQ(byte_size_text(1024), "1 KiB");
  EXPECT_EQ(byte_size_text(1536), "1.5 KiB");
  EXPECT_EQ(byte_size_text(int64_t{256} << 20), "256 MiB");
}

// A list's file names are the directory's own files: not a path, and not longer than a file
// name can be (found by fuzz_token_shards: a 300-byte tokenizer name made the lookup throw
// std::filesystem's "File name too long" where the name should have been refused).
TEST(InputFile, APlainFileNameIsOneFileOfTheDirectory) {
  EXPECT_TRUE(is_plain_file_name("tokenizer.json"));
  EXPECT_TRUE(is_plain_file_name(std::string(NAME_MAX, 'a')));
  EXPECT_FALSE(is_plain_file_name(std::string(NAME_MAX + 1, 'a')));
  const std::string bad_names[] = {
      "", ".", "..", "../x", "/dev/zero", "a/b", std::string("a\0b", 3)};
  for (const std::string& bad : bad_names) EXPECT_FALSE(is_plain_file_name(bad)) << bad;
}

}  // namespace
}  // namespace fp8lm
