#pragma once
// An owned allocation in a backend's memory, sized in elements, with the copies to and from
// the host: what a module's state and a test's operands live in on any device. Like a
// std::vector it has a size and a capacity (resize never shrinks the allocation), but new
// elements are not initialized: zero() them where that matters.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "fp8lm/error.h"
#include "kernels/backend.h"

namespace fp8lm {

template <typename T>
class BackendBuffer {
 public:
  explicit BackendBuffer(Backend& backend, size_t n = 0) : be_(&backend) { resize(n); }
  BackendBuffer(Backend& backend, const std::vector<T>& host)
      : BackendBuffer(backend, host.size()) {
    be_->upload(p_, host.data(), host.size() * sizeof(T));
  }
  BackendBuffer(const BackendBuffer&) = delete;
  BackendBuffer& operator=(const BackendBuffer&) = delete;
  BackendBuffer& operator=(BackendBuffer&& o) noexcept {
    swap(*this, o);
    return *this;
  }
  friend void swap(BackendBuffer& a, BackendBuffer& b) noexcept {
    std::swap(a.be_, b.be_);
    std::swap(a.p_, b.p_);
    std::swap(a.n_, b.n_);
    std::swap(a.cap_, b.cap_);
  }
  BackendBuffer(BackendBuffer&& o) noexcept
      : be_(o.be_),
        p_(std::exchange(o.p_, nullptr)),
        n_(std::exchange(o.n_, 0)),
        cap_(std::exchange(o.cap_, 0)) {}
  ~BackendBuffer() {
    if (p_) be_->release(p_);
  }

  // n elements; a larger n than the capacity reallocates, and the old contents are lost (they
  // are freed first, so peak memory is not doubled). An empty buffer holds no memory (data()
  // is null until it grows).
  void resize(size_t n) {
    n_ = n;
    if (n <= cap_) return;
    if (p_) be_->release(p_);
    p_ = nullptr;
    cap_ = 0;
    p_ = static_cast<T*>(be_->allocate(n * sizeof(T)));
    cap_ = n;
  }
  // Frees the memory (a later resize allocates again).
  void clear() {
    if (p_) be_->release(p_);
    p_ = nullptr;
    n_ = cap_ = 0;
  }
  T* data() { return p_; }
  const T* data() const { return p_; }
  size_t size() const { return n_; }
  Backend& backend() const { return *be_; }
  void zero() { be_->zero(p_, n_ * sizeof(T)); }
  bool empty() const { return n_ == 0; }
  size_t bytes() const { return cap_ * sizeof(T); }  // held, as a vector's capacity
  std::vector<T> to_host() const {
    std::vector<T> v(n_);
    be_->download(v.data(), p_, n_ * sizeof(T));
    return v;
  }
  // Replaces the contents with n == size() host values; Error naming `what` otherwise.
  void upload(const std::vector<T>& v, const std::string& what) {
    upload_bytes({reinterpret_cast<const uint8_t*>(v.data()), v.size() * sizeof(T)}, what);
  }
  // The same from raw bytes at any alignment (a mapped file's).
  void upload_bytes(std::span<const uint8_t> bytes, const std::string& what) {
    if (bytes.size() != n_ * sizeof(T)) {
      throw Error(what + ": " + std::to_string(bytes.size() / sizeof(T)) + " values for " +
                  std::to_string(n_));
    }
    be_->upload(p_, bytes.data(), bytes.size());
  }
  // Replaces the contents, in order, through fill(std::span<uint8_t>) over each piece: in place
  // where the host addresses the memory, else a piece at a time through one staging buffer
  // (uploaded as it is filled), so that reading a tensor in never holds all of it twice.
  template <class Fill>
  void fill_bytes(Fill&& fill) {
    const size_t total = n_ * sizeof(T);
    if (be_->host_memory()) {
      if (total) fill(std::span<uint8_t>(reinterpret_cast<uint8_t*>(p_), total));
      return;
    }
    std::vector<uint8_t> staging(std::min(total, kPiece));
    for (size_t at = 0; at < total; at += staging.size()) {
      const size_t n = std::min(staging.size(), total - at);
      fill(std::span<uint8_t>(staging.data(), n));
      be_->upload(reinterpret_cast<uint8_t*>(p_) + at, staging.data(), n);
    }
  }
  // The contents as bytes, in order, through sink(std::span<const uint8_t>): in place where the
  // host addresses the memory, else a piece at a time through one staging buffer, so that
  // writing a tensor out never copies all of it.
  template <class Sink>
  void read_bytes(Sink&& sink) const {
    const size_t total = n_ * sizeof(T);
    if (be_->host_memory()) {
      if (total) sink(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(p_), total));
      return;
    }
    std::vector<uint8_t> staging(std::min(total, kPiece));
    for (size_t at = 0; at < total; at += staging.size()) {
      const size_t n = std::min(staging.size(), total - at);
      be_->download(staging.data(), reinterpret_cast<const uint8_t*>(p_) + at, n);
      sink(std::span<const uint8_t>(staging.data(), n));
    }
  }
  // The elements in place, for code that runs only on the host (the CPU optimizer, tests of
  // CPU modules): Error on a backend whose memory the host cannot address.
  std::span<T> host() {
    if (!be_->host_memory()) {
      throw Error("a " + be_->name() + " buffer read in place on the host; copy it with to_host()");
    }
    return {p_, n_};
  }
  std::span<const T> host() const { return const_cast<BackendBuffer*>(this)->host(); }

 private:
  static constexpr size_t kPiece = size_t{16} << 20;  // a multiple of every element size

  Backend* be_;
  T* p_ = nullptr;
  size_t n_ = 0, cap_ = 0;
};

}  // namespace fp8lm
