// dist::ConfigureHostAllocator: an unknown DOCMATCH_HOST_ALLOCATOR is refused
// by name; "system" leaves glibc alone (a 64 MiB block is its own mapping);
// "retain" serves the same block from the heap and keeps it there after free.
#include <gtest/gtest.h>
#include <malloc.h>

#include <cstdlib>
#include <cstring>

#include "dist/runtime.h"

namespace docmatch::dist {
namespace {

constexpr size_t kBlock = size_t{64} << 20;

// Allocates, touches and frees kBlock; returns mallinfo2 while it was held.
struct mallinfo2 HoldAndFree() {
  auto* block = static_cast<volatile char*>(std::malloc(kBlock));
  EXPECT_NE(block, nullptr);
  for (size_t i = 0; i < kBlock; i += 4096) block[i] = 1;  // used, so the pair is not optimised away
  const struct mallinfo2 held = mallinfo2();
  std::free(const_cast<char*>(block));
  return held;
}

TEST(HostAllocator, RetainServesLargeBlocksFromAHeapThatFreeDoesNotShrink) {
  ::setenv("DOCMATCH_HOST_ALLOCATOR", "bogus", 1);
  try {
    ConfigureHostAllocator();
    ADD_FAILURE() << "an unknown mode was accepted";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("DOCMATCH_HOST_ALLOCATOR=bogus"), std::string::npos) << e.what();
  }

  ::setenv("DOCMATCH_HOST_ALLOCATOR", "system", 1);
  EXPECT_EQ(ConfigureHostAllocator(), "system");
  EXPECT_EQ(HostAllocator(), "system");
  const size_t mapped_before = mallinfo2().hblkhd;
  EXPECT_GE(HoldAndFree().hblkhd, mapped_before + kBlock) << "glibc's default maps a 64 MiB block on its own";
  EXPECT_LT(mallinfo2().hblkhd, mapped_before + kBlock) << "and unmaps it on free";

  ::unsetenv("DOCMATCH_HOST_ALLOCATOR");
  EXPECT_EQ(ConfigureHostAllocator(), "retain");
  EXPECT_EQ(HostAllocator(), "retain");
  const size_t mapped = mallinfo2().hblkhd;
  const struct mallinfo2 held = HoldAndFree();
  EXPECT_EQ(held.hblkhd, mapped) << "retain: no new mapping for the block";
  EXPECT_GE(held.arena, kBlock) << "retain: the block comes from the heap";
  const struct mallinfo2 after = mallinfo2();
  EXPECT_GE(after.arena, kBlock) << "retain: free does not trim the heap";
  EXPECT_GE(after.fordblks, kBlock) << "retain: the freed block waits in the heap for the next step";
}

}  // namespace
}  // namespace docmatch::dist
