// core/half.h: IEEE fp16 and bfloat16 <-> fp32 conversions (bit-exact, round-to-nearest-even).
#pragma once
#include <cstdint>
#include <cstring>

namespace unmask {

inline float bf16_to_f32(uint16_t h) {
  uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

inline float f16_to_f32(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t u;
  if (exp == 0) {
    if (mant == 0) {
      u = sign;
    } else {  // subnormal: normalise
      int e = -1;
      do { ++e; mant <<= 1; } while ((mant & 0x400u) == 0);
      u = sign | (uint32_t(127 - 15 - e) << 23) | ((mant & 0x3ffu) << 13);
    }
  } else if (exp == 31) {
    u = sign | 0x7f800000u | (mant << 13);
  } else {
    u = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline uint16_t f32_to_f16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return uint16_t(sign | 0x7e00u);  // NaN
  if (abs >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // overflow -> inf
  if (abs < 0x38800000u) {  // subnormal or zero in fp16
    if (abs < 0x33000000u) return uint16_t(sign);
    uint32_t e = abs >> 23;
    uint32_t m = (abs & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126 - e;  // 14 - (e - 127) + 13 - 1 ... bits to drop
    uint32_t half_m = m >> (shift - 0);
    uint32_t rem = m & ((1u << shift) - 1);
    uint32_t halfway = 1u << (shift - 1);
    half_m = m >> shift;
    if (rem > halfway || (rem == halfway && (half_m & 1))) ++half_m;
    return uint16_t(sign | half_m);
  }
  uint32_t r = abs + 0xfffu + ((abs >> 13) & 1u);  // round to nearest even at bit 13
  r -= 0x38000000u;                                // rebias 127 -> 15
  return uint16_t(sign | (r >> 13));
}

}  // namespace unmask
