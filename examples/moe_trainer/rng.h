// rng.h: counter-based random numbers. Every value is a pure function of (seed, stream, index),
// so parameter init does not depend on how tensors are sharded over ranks (an expert gets the
// same weights on whichever EP rank holds it) and the batch of step s is the same for any DP
// size and after a resume.
#ifndef MOE_TRAINER_RNG_H_
#define MOE_TRAINER_RNG_H_

#include <cmath>
#include <cstdint>
#include <string>

namespace moe {

// SplitMix64 finalizer: a good 64-bit mixer (Steele, Lea, Flood 2014).
inline uint64_t Mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

inline uint64_t HashString(const std::string& s) {
  uint64_t h = 1469598103934665603ULL;  // FNV-1a, then mixed
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ULL;
  return Mix64(h);
}

// Uniform in (0, 1), never exactly 0 (safe for log).
inline double UniformOpen(uint64_t seed, uint64_t stream, uint64_t index) {
  uint64_t bits = Mix64(seed ^ Mix64(stream ^ Mix64(index)));
  return (static_cast<double>(bits >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

// Standard normal by Box-Muller on two independent uniforms.
inline double Normal(uint64_t seed, uint64_t stream, uint64_t index) {
  double u1 = UniformOpen(seed, stream, 2 * index);
  double u2 = UniformOpen(seed, stream, 2 * index + 1);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

}  // namespace moe

#endif  // MOE_TRAINER_RNG_H_
