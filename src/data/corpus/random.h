// Counter-based randomness for everything decided about a document.
//
// The design asks that masks, splits and orders depend only on (seed, epoch,
// document index), never on which rank drew them or how many draws came
// before: a KeyedRandom is a pure function of its keys. It is splitmix64 (a
// well-known 64-bit mixer) seeded by hashing the keys; the bounded draw is
// Lemire's multiply-shift with rejection, so sequences are identical on every
// platform and standard library (std::uniform_int_distribution is not).
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <utility>
#include <vector>

namespace docmatch::data {

// splitmix64's finaliser: a bijective 64-bit mix.
uint64_t Mix64(uint64_t x);

class KeyedRandom {
 public:
  KeyedRandom(uint64_t seed, std::initializer_list<uint64_t> keys);

  uint64_t Next();
  // Uniform in [0, n), n > 0.
  uint64_t Below(uint64_t n);
  // Uniform in [0, 1).
  double Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }

  // Fisher-Yates with this generator.
  template <typename T>
  void Shuffle(std::vector<T>* values) {
    for (size_t i = values->size(); i > 1; --i) std::swap((*values)[i - 1], (*values)[Below(i)]);
  }

 private:
  uint64_t state_;
};

}  // namespace docmatch::data
