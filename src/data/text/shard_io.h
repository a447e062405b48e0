// data/text/shard_io.h: internals of the HDF5 shard reader shared with the loader.
//
// The HDF5 library Debian ships is built without its thread-safety option, so every HDF5 call
// of the process goes through hdf5_lock(); a prefetch thread reading one shard therefore
// waits for another thread's read or write, never overlaps it. HDF5's own error-stack printing
// is switched off once (H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr)): failures become
// unmask::Error messages naming the file and the dataset instead.
#pragma once
#include <cstdint>
#include <mutex>
#include <string>

#include "data/text/pretrain_data.h"

namespace unmask::data {

/// The sizes of a shard, from its metadata only (no data is read).
struct ShardInfo {
  int64_t num_instances = 0, seq_length = 0, max_predictions = 0;
};

/// Opens `path` and checks what read_shard checks that needs no data: every key present, an
/// integer type, the ranks, and equal first dimensions (and S / P across the datasets).
ShardInfo inspect_shard(const std::string& path);

/// write_shard with the chunk compression spread over num_threads threads (the public
/// write_shard uses one). The file is the same for any thread count.
void write_shard(const std::string& path, const PretrainShard& shard, int num_threads);

/// The process-wide lock around HDF5 calls (see above).
std::mutex& hdf5_lock();

}  // namespace unmask::data
