// dist/shard.cc: per-rank slices of the data and V-SWIFT's resampling to equal counts.
#include "dist/shard.h"

#include <algorithm>
#include <numeric>

#include "data/rng.h"
#include "unmask/error.h"

namespace unmask::dist {

namespace {
void check_rank(int rank, int size, const char* fn) {
  if (size < 1 || rank < 0 || rank >= size) throw Error("dist: ", fn, ": rank ", rank, " is not in [0, ", size, ")");
}
}  // namespace

Range shard_range(int64_t n, int rank, int size) {
  check_rank(rank, size, "shard_range");
  if (n < 0) throw Error("dist: shard_range: negative item count ", n);
  const int64_t base = n / size, extra = n % size;
  const int64_t begin = rank * base + std::min<int64_t>(rank, extra);
  return {begin, begin + base + (rank < extra ? 1 : 0)};
}

Range equal_shard_range(int64_t n, int rank, int size) {
  check_rank(rank, size, "equal_shard_range");
  if (n < 0) throw Error("dist: equal_shard_range: negative item count ", n);
  const int64_t base = n / size;
  return {rank * base, (rank + 1) * base};
}

std::vector<std::string> shard_files(const std::vector<std::string>& files, int rank, int size) {
  check_rank(rank, size, "shard_files");
  if (int64_t(files.size()) < size)
    throw Error("dist: ", files.size(), " data files for ", size, " ranks: rank ", files.size(),
                " and above would read nothing",
                Hint("write at least one shard per rank (prepare-text --shards N, N >= ranks)"));
  std::vector<std::string> mine;
  for (size_t i = size_t(rank); i < files.size(); i += size_t(size)) mine.push_back(files[i]);
  return mine;
}

std::vector<int64_t> resample_to_equal(const std::vector<int64_t>& count_per_rank, int rank, uint64_t seed,
                                       uint64_t epoch) {
  check_rank(rank, int(count_per_rank.size()), "resample_to_equal");
  for (size_t r = 0; r < count_per_rank.size(); ++r)
    if (count_per_rank[r] < 0) throw Error("dist: resample_to_equal: rank ", r, " has ", count_per_rank[r], " samples");
  const int64_t local = count_per_rank[size_t(rank)];
  const int64_t target = *std::max_element(count_per_rank.begin(), count_per_rank.end());
  if (local == 0 && target > 0)
    throw Error("dist: rank ", rank, " holds no samples while another holds ", target,
                Hint("give every machine part of the dataset"));
  std::vector<int64_t> order;
  order.reserve(static_cast<size_t>(target));
  std::vector<int64_t> pass(static_cast<size_t>(local));
  // Pass 0 covers every local sample once; passes 1, 2, ... draw the extra samples.
  for (uint64_t k = 0; int64_t(order.size()) < target; ++k) {
    std::iota(pass.begin(), pass.end(), int64_t(0));
    data::Rng rng(data::derive_key(seed, {data::kStreamRank, uint64_t(rank), epoch, k}));
    rng.shuffle(pass.data(), local);
    const int64_t take = std::min<int64_t>(local, target - int64_t(order.size()));
    order.insert(order.end(), pass.begin(), pass.begin() + take);
  }
  return order;
}

uint64_t rank_seed(uint64_t seed, int rank) {
  if (rank < 0) throw Error("dist: rank_seed: negative rank ", rank);
  return data::derive_key(seed, {data::kStreamRank, uint64_t(rank)});
}

std::string with_rank(std::string path, int rank) {
  const std::string key = "{rank}";
  for (size_t at = path.find(key); at != std::string::npos; at = path.find(key, at))
    path.replace(at, key.size(), std::to_string(rank));
  return path;
}

bool has_rank_placeholder(const std::string& path) { return path.find("{rank}") != std::string::npos; }

}  // namespace unmask::dist
