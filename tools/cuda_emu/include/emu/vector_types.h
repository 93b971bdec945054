#pragma once
// CUDA's built-in vector types with their device alignments (a float4 load is a 16-byte load).

struct uint3 {
  unsigned x, y, z;
};

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  constexpr dim3(unsigned vx = 1, unsigned vy = 1, unsigned vz = 1) : x(vx), y(vy), z(vz) {}
  constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
  constexpr operator uint3() const { return {x, y, z}; }
};

struct alignas(8) int2 {
  int x, y;
};
struct alignas(8) uint2 {
  unsigned x, y;
};
struct alignas(8) float2 {
  float x, y;
};
struct alignas(16) int4 {
  int x, y, z, w;
};
struct alignas(16) uint4 {
  unsigned x, y, z, w;
};
struct alignas(16) float4 {
  float x, y, z, w;
};

inline constexpr int2 make_int2(int x, int y) {
  return {x, y};
}
inline constexpr uint2 make_uint2(unsigned x, unsigned y) {
  return {x, y};
}
inline constexpr float2 make_float2(float x, float y) {
  return {x, y};
}
inline constexpr int4 make_int4(int x, int y, int z, int w) {
  return {x, y, z, w};
}
inline constexpr uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) {
  return {x, y, z, w};
}
inline constexpr float4 make_float4(float x, float y, float z, float w) {
  return {x, y, z, w};
}
