// The safetensors reader and writer on their own: the file's layout, when checksums are
// checked, and TensorReader, which loads read a large tensor through (once from the disk,
// straight into its home).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "fp8lm/error.h"
#include "io/safetensors.h"
#include "run_util.h"
#include "safetensors_edit.h"

namespace fp8lm {
namespace {

using namespace test;  // the file-editing helpers

// n floats, different for each tensor, so a misplaced byte range cannot pass.
std::vector<float> ramp(size_t n, float start) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = start + static_cast<float>(i % 4099);
  return v;
}

// Two large tensors (1 MiB and over) and two small ones, named so that the name order
// interleaves them.
std::string write_mixed(const std::string& name) {
  SafetensorsWriter w;
  w.add_f32("a_large", {int64_t{1} << 18}, ramp(size_t{1} << 18, 1));
  w.add_f32("b_small", {3}, ramp(3, 2));
  w.add_f32("c_large", {(int64_t{1} << 18) + 5}, ramp((size_t{1} << 18) + 5, 3));
  w.add_f32("d_small", {2, 2}, ramp(4, 4));
  const std::string path = fresh_dir(name) + ".safetensors";
  w.write(path);
  return path;
}

std::vector<float> floats(std::span<const uint8_t> bytes) {
  std::vector<float> v(bytes.size() / 4);
  std::memcpy(v.data(), bytes.data(), bytes.size());
  return v;
}

// Issue 12 (9): a reader taking the large tensors front to back finds every small one in a
// few pages at the start, not between two large ones.
TEST(Safetensors, SmallTensorsComeFirstAndEveryTensorReadsBack) {
  const std::string path = write_mixed("layout");
  const Safetensors f = Safetensors::read(path);
  EXPECT_EQ(f.names(), (std::vector<std::string>{"b_small", "d_small", "a_large", "c_large"}));
  EXPECT_LT(f.position("d_small"), f.position("a_large"));
  EXPECT_EQ(f.at("a_large").to_f32(), ramp(size_t{1} << 18, 1));
  EXPECT_EQ(f.at("b_small").to_f32(), ramp(3, 2));
  EXPECT_EQ(f.at("c_large").to_f32(), ramp((size_t{1} << 18) + 5, 3));
  EXPECT_EQ(f.at("d_small").to_f32(), ramp(4, 4));
  EXPECT_EQ(f.at("d_small").shape, (std::vector<int64_t>{2, 2}));
}

// Verify::AtOpen refuses a damaged file whole; Verify::OnFirstUse (loads into objects that are
// dropped on Error) opens it, hands out every intact tensor and refuses the damaged one when
// it is asked for, through at() or a TensorReader alike.
TEST(Safetensors, ChecksumsAreCheckedAtOpenOrOnFirstUse) {
  const std::string path = write_mixed("on_first_use");
  std::vector<uint8_t> bytes = read_bytes(path);
  bytes[data_offset(bytes, "c_large") + 4096] ^= 0x01;
  write_bytes(path, bytes);
  const std::string damaged =
      fmt::format("{}: tensor 'c_large' does not match its checksum: the file is damaged", path);
  try {
    (void)Safetensors::read(path);
    ADD_FAILURE() << "opened a damaged file";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), damaged);
  }
  const Safetensors f = Safetensors::read(path, Verify::OnFirstUse);
  EXPECT_EQ(f.at("a_large").to_f32(), ramp(size_t{1} << 18, 1));
  EXPECT_EQ(f.at("d_small").to_f32(), ramp(4, 4));
  try {
    (void)f.at("c_large");
    ADD_FAILURE() << "handed out a damaged tensor";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), damaged);
  }
  TensorReader in(f, "c_large", TensorReader::Check::Checksum);
  std::vector<uint8_t> home(in.bytes());
  in.read(home);
  try {
    (void)in.finish();
    ADD_FAILURE() << "a damaged tensor read through";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), damaged);
  }
}

// Pieces of any size (a device's staging buffer, a host buffer whole) give the tensor's bytes
// in order; finish() checks that all were read, and reports non-finite values when asked.
TEST(Safetensors, TensorReaderReadsInPiecesAndChecksAtTheEnd) {
  SafetensorsWriter w;
  std::vector<float> with_nan = ramp(size_t{3} << 18, 7);
  with_nan[123457] = std::numeric_limits<float>::quiet_NaN();
  w.add_f32("finite", {int64_t{3} << 18}, ramp(size_t{3} << 18, 5));
  w.add_f32("with_nan", {int64_t{3} << 18}, with_nan);
  const std::string path = fresh_dir("reader") + ".safetensors";
  w.write(path);
  const Safetensors f = Safetensors::read(path, Verify::OnFirstUse);
  for (const size_t piece : {size_t{4}, size_t{1} << 12, (size_t{1} << 20) + 12, size_t{3} << 20}) {
    SCOPED_TRACE(piece);
    TensorReader in(f, "finite", TensorReader::Check::ChecksumAndFinite);
    EXPECT_EQ(in.dtype(), DType::F32);
    EXPECT_EQ(in.shape(), (std::vector<int64_t>{int64_t{3} << 18}));
    std::vector<uint8_t> home(in.bytes());
    // Only the first pieces, on small sizes: 4-byte pieces over 3 MB would take long.
    const size_t end = piece < 4096 ? 64 * piece : home.size();
    for (size_t at = 0; at < end; at += piece)
      in.read(std::span(home).subspan(at, std::min(piece, home.size() - at)));
    if (end < home.size()) {
      EXPECT_THROW((void)in.finish(), Error);  // not all read: an internal error, not a pass
      in.read(std::span(home).subspan(end));
    }
    EXPECT_TRUE(in.finish());
    EXPECT_EQ(floats(home), ramp(size_t{3} << 18, 5));
    EXPECT_THROW(in.read(std::span(home).first(4)), Error);  // past the end
  }
  TensorReader in(f, "with_nan", TensorReader::Check::ChecksumAndFinite);
  std::vector<uint8_t> home(in.bytes());
  in.read(home);
  EXPECT_FALSE(in.finish());
  TensorReader unchecked(f, "with_nan", TensorReader::Check::Checksum);
  unchecked.read(home);
  EXPECT_TRUE(unchecked.finish());
}

// Issue 30 (D22): the header's offsets cover the data exactly, as the format requires; bytes
// that belong to no tensor, after the last one or between two, are refused by their count.
TEST(Safetensors, BytesThatBelongToNoTensorAreRefused) {
  const std::string path = write_mixed("trailing");
  const std::vector<uint8_t> good = read_bytes(path);
  std::vector<uint8_t> bad = good;
  bad.insert(bad.end(), {'e', 'x', 't', 'r', 'a'});
  write_bytes(path, bad);
  try {
    (void)Safetensors::read(path);
    ADD_FAILURE() << "read a file with 5 trailing bytes";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              path + ": 5 bytes after the last tensor's data belong to no tensor");
  }
  // A gap: the first tensor's range starts 8 bytes in (the data grown to keep the sizes).
  bad = good;
  nlohmann::json h = nlohmann::json::parse(header_of(bad));
  for (auto& [name, entry] : h.items()) {
    if (name == "__metadata__") continue;
    for (auto& o : entry["data_offsets"]) o = o.get<uint64_t>() + 8;
  }
  set_header(bad, h.dump());
  const size_t data_start = bad.size() - (good.size() - 8 - header_of(good).size());
  bad.insert(bad.begin() + static_cast<long>(data_start), 8, 0);
  reseal(bad);
  write_bytes(path, bad);
  try {
    (void)Safetensors::read(path);
    ADD_FAILURE() << "read a file with a gap before its first tensor";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), path + ": 8 bytes at data offset 0 belong to no tensor");
  }
  write_bytes(path, good);
  EXPECT_NO_THROW((void)Safetensors::read(path));
}

// Issue 30 (D10): the checksum list covers the header too (the tensor table and the metadata),
// and a file of this format version without it is refused, not read as another tool's file.
TEST(Safetensors, TheHeaderIsCheckedAndItsChecksumIsRequired) {
  const std::string path = write_mixed("sealed");
  const std::vector<uint8_t> good = read_bytes(path);
  EXPECT_EQ(Safetensors::read(path).integrity(), Integrity::Sealed);
  EXPECT_EQ(Safetensors::read_metadata(path).at("fp8lm_format_version"), "2");
  const auto refused = [&](const std::string& needle) {
    for (const bool header_only : {false, true}) {
      try {
        if (header_only) {
          (void)Safetensors::read_metadata(path);
        } else {
          (void)Safetensors::read(path);
        }
        ADD_FAILURE() << "read: " << needle;
      } catch (const Error& e) {
        EXPECT_EQ(std::string(e.what()), path + ": " + needle);
      }
    }
  };
  set_metadata(path, "note", "added by hand", Seal::Break);
  refused(
      "its header (the metadata or the tensor table) does not match its checksum: the file was "
      "changed after fp8lm wrote it");
  write_bytes(path, good);
  std::vector<uint8_t> bytes = good;
  replace_in_header(bytes, "\"shape\":[3]", "\"shape\":[1,3]");  // the same bytes, reshaped
  write_bytes(path, bytes);
  refused(
      "its header (the metadata or the tensor table) does not match its checksum: the file was "
      "changed after fp8lm wrote it");
  write_bytes(path, good);
  set_metadata(path, "xxh3_64", std::nullopt, Seal::Break);
  refused(
      "its checksum list (metadata 'xxh3_64') is missing: the file was changed after fp8lm "
      "wrote it");
  write_bytes(path, good);
  set_metadata(path, "fp8lm_format_version", "3");
  refused("written by a newer fp8lm (file format version 3; this one reads up to 2)");
  // Older files: tensor checksums only, or none at all, are read as they are.
  bytes = good;
  as_format_version_1(bytes);
  write_bytes(path, bytes);
  EXPECT_EQ(Safetensors::read(path).integrity(), Integrity::TensorsOnly);
  bytes = good;
  without_checksums(bytes);
  write_bytes(path, bytes);
  EXPECT_EQ(Safetensors::read(path).integrity(), Integrity::None);
}

}  // namespace
}  // namespace fp8lm
