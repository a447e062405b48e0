// fuzz/fuzz_clip_store.cc: libFuzzer target for the clip store reader (video/clip_store.h).
//
// Arbitrary bytes become an index.bin and its chunks; ClipStore::from_memory must either throw
// unmask::Error or give entries whose frames read back (or fail their checksum with an Error):
// never a crash, an out-of-bounds read, a huge allocation or a hang.
//
// Input layout: byte 0 = options (bit 0: verify the index's own crc32; off most of the time so
// the parser behind it gets exercised), bytes 1-4 = little-endian index length L (clamped to
// what is there), then L index bytes, then the chunk bytes, cut into the chunk sizes the index
// declares at its fixed header offsets (chunk count at byte 48, sizes from byte 64) so valid
// seeds reach read_frames.
//
//   clang++ -std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -Iinclude -Isrc \
//       fuzz/fuzz_clip_store.cc src/data/video/clip_store.cc src/data/video/sampling.cc -lz -o /tmp/fuzz_clip_store
//   /tmp/fuzz_clip_store -max_total_time=60 fuzz/corpus_clip_store
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "unmask/error.h"
#include "data/video/clip_store.h"

namespace {

void check(bool ok) {
  if (!ok) std::abort();  // an invariant broke: let libFuzzer record the input
}

uint64_t u64_at(const std::string& s, size_t at) {
  uint64_t v = 0;
  if (at + 8 <= s.size()) std::memcpy(&v, s.data() + at, 8);
  return v;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 5) return 0;
  const bool verify = data[0] & 1;
  uint32_t index_len = 0;
  std::memcpy(&index_len, data + 1, 4);
  const size_t body = size - 5;
  if (index_len > body) index_len = uint32_t(body);
  const std::string index(reinterpret_cast<const char*>(data + 5), index_len);
  std::string rest(reinterpret_cast<const char*>(data + 5 + index_len), body - index_len);

  std::vector<std::string> chunks;
  const uint64_t declared = u64_at(index, 48);
  if (declared <= 64) {
    size_t at = 0;
    for (uint64_t c = 0; c < declared; ++c) {
      const uint64_t want = u64_at(index, 64 + 8 * c);
      const size_t n = size_t(std::min<uint64_t>(want, rest.size() - at));
      chunks.push_back(rest.substr(at, n));
      at += n;
    }
  }
  unmask::video::ClipStoreOpenOptions options;
  options.verify_index_checksum = verify;
  try {
    const unmask::video::ClipStore store = unmask::video::ClipStore::from_memory(index, chunks, "fuzz", options);
    check(store.size() >= 0);
    for (int64_t i = 0; i < store.size() && i < 32; ++i) {
      const unmask::video::ClipStoreEntry& e = store.entry(i);
      check(e.frames > 0 && e.height > 0 && e.width > 0);
      check(e.chunk < store.header().chunk_bytes.size());
      check(e.offset + e.frame_bytes() * uint64_t(e.frames) <= store.header().chunk_bytes[e.chunk]);
      try {
        const unmask::video::Clip c = store.read_frames(i, {e.frames - 1, 0, e.frames - 1});
        check(c.frames == 3 && c.rgb.size() == 3 * e.frame_bytes());
      } catch (const unmask::Error&) {
        // a checksum mismatch
      }
      try {
        store.read_frames(i, {e.frames});
        check(false);  // past the end must be an Error
      } catch (const unmask::Error&) {
      }
    }
    try {
      store.entry(store.size());
      check(false);
    } catch (const unmask::Error&) {
    }
  } catch (const unmask::Error&) {
    // Expected for damaged stores.
  }
  return 0;
}
