// train/rank_data.cc: plan_rank_data and rank_start_position (see rank_data.h).
#include "train/rank_data.h"

#include <algorithm>

#include "dist/shard.h"
#include "unmask/error.h"

namespace unmask::train {

RankData plan_rank_data(const PretrainConfig& cfg, const RankLayout& r) {
  if (r.size < 1 || r.rank < 0 || r.rank >= r.size || r.local_size < 1 || r.local_rank < 0 || r.local_rank >= r.local_size)
    throw Error("data sharding: rank ", r.rank, " of ", r.size, " (", r.local_rank, " of ", r.local_size,
                " on its host) is not a valid rank layout");
  RankData d;
  d.data = cfg.data;
  const bool has_placeholder = dist::has_rank_placeholder(cfg.data);
  if (has_placeholder && cfg.data_sharding != DataSharding::local)
    throw Error("data = \"", cfg.data, "\" holds {rank}, which only data_sharding = \"local\" replaces",
                Hint("set data_sharding = \"local\" (each rank reads its own directory) or remove {rank}"));
  switch (cfg.data_sharding) {
    case DataSharding::batch:
      d.files = data::list_shards(cfg.data);
      d.loader_batch = cfg.batch * r.size;
      d.loader_seed = cfg.seed;
      if (r.size > 1) {  // the loader walks the global batch but builds (reads out, masks) only these rows
        const dist::Range rows = dist::shard_range(d.loader_batch, r.rank, r.size);
        d.keep_begin = rows.begin, d.keep_end = rows.end;
      }
      return d;
    case DataSharding::files: {
      const std::vector<std::string> all = data::list_shards(cfg.data);
      if (int64_t(all.size()) < r.size)
        throw Error("data_sharding = \"files\": ", cfg.data, " holds ", all.size(), " shard(s) for ", r.size,
                    " ranks, so some ranks would read nothing",
                    Hint("write at least one shard per rank (unmask prepare-text --shards " + std::to_string(r.size) +
                         "), or use data_sharding = \"batch\""));
      // DLE's run_pretraining: each epoch shuffles the file list with the run's seed and rank r
      // reads files r, r + N, ... of it; masks are keyed by (file, row), so no two ranks draw alike.
      d.files = all;
      d.file_rank = r.rank, d.file_ranks = r.size;
      d.loader_batch = cfg.batch;
      d.loader_seed = cfg.seed;
      return d;
    }
    case DataSharding::local: {
      d.data = dist::with_rank(cfg.data, r.rank);
      std::vector<std::string> here = data::list_shards(d.data);
      if (!has_placeholder && r.local_size > 1) {  // the host's ranks share its directory: deal its shards
        if (int64_t(here.size()) < r.local_size)
          throw Error("data_sharding = \"local\": ", d.data, " holds ", here.size(), " shard(s) for the ", r.local_size,
                      " ranks on this host, so some would read nothing",
                      Hint("write at least one shard per rank of the host, or give each rank its own directory "
                           "with {rank} in data"));
        here = dist::shard_files(here, r.local_rank, r.local_size);
      }
      d.files = std::move(here);
      break;
    }
  }
  d.loader_batch = cfg.batch;
  d.loader_seed = dist::rank_seed(cfg.seed, r.rank);
  return d;
}

data::LoaderPosition rank_start_position(DataSharding sharding, const TrainerState& resumed, int rank, int size,
                                         std::string* why) {
  const std::string mode = data_sharding_name(sharding);
  const bool per_rank = sharding != DataSharding::batch;
  if (resumed.data_sharding == mode) {
    if (!per_rank) return resumed.loader;
    if (int64_t(resumed.rank_loaders.size()) == size) return resumed.rank_loaders[size_t(rank)];
  }
  int64_t furthest = resumed.loader.epoch;
  for (const data::LoaderPosition& p : resumed.rank_loaders) furthest = std::max(furthest, p.epoch);
  if (why) {
    const size_t saved_ranks = resumed.rank_loaders.empty() ? 1 : resumed.rank_loaders.size();
    *why = "the checkpoint's data positions are for data_sharding = \"" + resumed.data_sharding + "\"" +
           (resumed.data_sharding == "batch" ? std::string() : " on " + std::to_string(saved_ranks) + " rank(s)") +
           "; this run (data_sharding = \"" + mode + "\"" +
           (per_rank ? " on " + std::to_string(size) + " rank(s)" : std::string()) +
           ") cannot continue them, so every rank starts data epoch " + std::to_string(furthest + 1) +
           " from its beginning";
  }
  return {furthest + 1, 0, 0};
}

}  // namespace unmask::train
