// KeyedRandom: a counter-based generator whose stream is a pure function of its
// key (seed, epoch, document index), so no draw depends on the rank (random.h).
#include "data/corpus/random.h"

namespace docmatch::data {

uint64_t Mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

KeyedRandom::KeyedRandom(uint64_t seed, std::initializer_list<uint64_t> keys) : state_(Mix64(seed)) {
  // Chained mixing: (a, b) and (b, a) give different streams.
  for (uint64_t key : keys) state_ = Mix64(state_ ^ Mix64(key + 0x9e3779b97f4a7c15ULL));
}

uint64_t KeyedRandom::Next() {
  state_ += 0x9e3779b97f4a7c15ULL;
  return Mix64(state_);
}

uint64_t KeyedRandom::Below(uint64_t n) {
  // Lemire: the high word of a 128-bit product, rejecting the biased low zone.
  unsigned __int128 product = static_cast<unsigned __int128>(Next()) * n;
  uint64_t low = static_cast<uint64_t>(product);
  if (low < n) {
    const uint64_t threshold = (0 - n) % n;
    while (low < threshold) {
      product = static_cast<unsigned __int128>(Next()) * n;
      low = static_cast<uint64_t>(product);
    }
  }
  return static_cast<uint64_t>(product >> 64);
}

}  // namespace docmatch::data
