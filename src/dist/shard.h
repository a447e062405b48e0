// dist/shard.h: which part of the data each rank reads (issue 5, V-SWIFT's two modes).
//
// Mode 1, every machine holds the whole dataset: each rank reads a disjoint slice,
//   dist::Range r = dist::equal_shard_range(num_samples, comm.rank(), comm.size());
//   auto mine = dist::shard_files(hdf5_files, comm.rank(), comm.size());    // round-robin files
// Mode 2, each machine holds only its part (V-SWIFT --gpus_not_equal_num_shards): ranks have
// different counts, so each draws its own samples again until all reach the largest count and
// take the same number of steps:
//   auto counts = comm.allgather_pod<int64_t>(local_count);
//   std::vector<int64_t> order = dist::resample_to_equal(counts, comm.rank(), seed, epoch);
// Random streams that must differ between ranks (augmentation) are keyed by rank_seed(seed,
// rank). Streams keyed by the sample's identity (the loader's dynamic masks, keyed by epoch, file,
// instance) must not be: then 2 ranks x B/2 see exactly the masks 1 rank x B sees.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace unmask::dist {

/// Half-open index range [begin, end).
struct Range {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
  bool operator==(const Range&) const = default;
};

/// Rank `rank` of `size`'s contiguous slice of n items. The slices are disjoint and cover [0, n);
/// the first n % size ranks get one item more.
Range shard_range(int64_t n, int rank, int size);
/// The same, but every rank gets floor(n / size) items (the last n % size items are left out), so
/// all ranks take the same number of steps.
Range equal_shard_range(int64_t n, int rank, int size);
/// files[rank], files[rank + size], ...: round-robin, so shards of similar size spread evenly.
/// An Error when there are fewer files than ranks (a rank would have no data).
std::vector<std::string> shard_files(const std::vector<std::string>& files, int rank, int size);
/// Mode 2: the order in which rank `rank` reads its count_per_rank[rank] local samples in epoch
/// `epoch`, max(count_per_rank) entries long: a shuffled pass over all local samples, then further
/// shuffled passes cut where the largest count is reached (each sample appears floor(max/local) or
/// one more times). A pure function of (counts, rank, seed, epoch).
std::vector<int64_t> resample_to_equal(const std::vector<int64_t>& count_per_rank, int rank, uint64_t seed,
                                       uint64_t epoch = 0);
/// `path` with every "{rank}" replaced by the rank: each rank's own part of the data (mode 2).
std::string with_rank(std::string path, int rank);
/// Whether `path` holds the "{rank}" placeholder.
bool has_rank_placeholder(const std::string& path);
/// The seed of rank `rank`'s own random streams: data::derive_key(seed, {kStreamRank, rank}).
uint64_t rank_seed(uint64_t seed, int rank);

}  // namespace unmask::dist
