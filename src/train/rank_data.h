// train/rank_data.h: what one rank of a data-parallel pretraining run reads (config key
// data_sharding, train/config.h), and where its loader starts on resume.
//
//   train::RankData d = train::plan_rank_data(cfg, {.rank = 1, .size = 4, .local_rank = 1, .local_size = 4});
//   data::LoaderOptions lo; lo.files = d.files; lo.batch_size = d.loader_batch; lo.seed = d.loader_seed;
//   data::LoaderPosition p = train::rank_start_position(cfg.data_sharding, resumed, 1, 4, &why);
//
// A pure function of its arguments (no MPI): the trainer calls it with the communicator's
// numbers and the tests call it for every rank of a pretend job.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "data/text/pretrain_data.h"
#include "train/checkpoint.h"
#include "train/config.h"

namespace unmask::train {

struct RankLayout {
  int rank = 0, size = 1;              // in the job
  int local_rank = 0, local_size = 1;  // on this host
};

struct RankData {
  std::string data;                // cfg.data, with "{rank}" replaced (local)
  std::vector<std::string> files;  // the shards this rank's loader reads
  int64_t loader_batch = 0;        // batch: the global batch (cfg.batch x ranks); else cfg.batch
  uint64_t loader_seed = 0;        // batch, files: cfg.seed (every rank the same); local: dist::rank_seed(cfg.seed, rank)
  // batch with > 1 rank: the loader builds only rows shard_range(global batch, rank, size) of each
  // global batch (LoaderOptions::keep_begin / keep_end); -1 = all rows.
  int64_t keep_begin = 0, keep_end = -1;
  // files: every rank lists all the shards and reads its positions of each epoch's shared shuffle
  // (LoaderOptions::file_rank / file_ranks), so the files a rank reads change from epoch to epoch.
  int file_rank = 0, file_ranks = 1;
};

/// The files, batch and seed of rank `r.rank`. Errors: data_sharding = files with fewer shards
/// than ranks (a rank would read nothing), local without shards for a host's rank, a missing path.
RankData plan_rank_data(const PretrainConfig& cfg, const RankLayout& r);

/// Where rank `rank` of `size` starts reading when resuming from `resumed`: the checkpoint's own
/// position when it was written with the same sharding (and, for files / local, the same rank
/// count); otherwise the start of a new epoch (one past the furthest epoch any rank had reached),
/// with `*why` set to a sentence saying so. batch mode positions are the global loader's.
data::LoaderPosition rank_start_position(DataSharding sharding, const TrainerState& resumed, int rank, int size,
                                         std::string* why);

}  // namespace unmask::train
