// tests/test_rank_data.cc: who reads what in a data-parallel pretraining run (train/rank_data.h),
// for every rank of pretend jobs, and the resume positions. The MPI end-to-end runs are in
// tests/mpi/test_dp_pretrain.sh.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <set>

#include "data/text/pretrain_data.h"
#include "temp_dir.h"
#include "train/rank_data.h"
#include "unmask/error.h"

namespace unmask {
namespace {

using test::TempDir;

// A shard whose instance i carries the id `first_id + i` at position 1 (no masks), so the rows a
// loader yields name the instances they came from.
void write_numbered_shard(const std::string& path, int64_t n, int32_t first_id) {
  const int64_t S = 8, P = 2;
  data::PretrainShard sh;
  sh.num_instances = n, sh.seq_length = S, sh.max_predictions = P;
  sh.input_ids.assign(size_t(n * S), 0);
  sh.input_mask.assign(size_t(n * S), 0);
  sh.segment_ids.assign(size_t(n * S), 0);
  sh.masked_lm_positions.assign(size_t(n * P), 0);
  sh.masked_lm_ids.assign(size_t(n * P), 0);
  sh.next_sentence_labels.assign(size_t(n), 0);
  for (int64_t i = 0; i < n; ++i) {
    sh.input_ids[size_t(i * S)] = 101;
    sh.input_ids[size_t(i * S + 1)] = first_id + int32_t(i);
    sh.input_ids[size_t(i * S + 2)] = 102;
    for (int c = 0; c < 3; ++c) sh.input_mask[size_t(i * S + c)] = 1;
  }
  data::write_shard(path, sh);
}

// The instance ids of the next `count` rows.
std::vector<int32_t> take_ids(data::PretrainLoader& loader, int64_t count) {
  std::vector<int32_t> ids;
  while (int64_t(ids.size()) < count) {
    PretrainBatch b = loader.next();
    for (int64_t r = 0; r < b.input_ids.size(0); ++r) ids.push_back(b.input_ids.data<int32_t>()[r * 8 + 1]);
  }
  ids.resize(size_t(count));
  return ids;
}

train::PretrainConfig config_for(const std::string& data, train::DataSharding mode) {
  train::PretrainConfig c;
  c.data = data;
  c.batch = 4;
  c.seed = 7;
  c.data_sharding = mode;
  return c;
}

data::PretrainLoader loader_of(const train::RankData& d, const data::LoaderPosition& start = {}) {
  data::LoaderOptions lo;
  lo.files = d.files;
  lo.batch_size = d.loader_batch;
  lo.seed = d.loader_seed;
  lo.file_rank = d.file_rank, lo.file_ranks = d.file_ranks;
  lo.prefetch = false;
  return data::PretrainLoader(lo, start);
}

TEST(RankData, BatchShardingGivesEveryRankTheGlobalBatch) {
  TempDir dir("rank_data");
  for (int f = 0; f < 3; ++f) write_numbered_shard(dir.file("shard_0000" + std::to_string(f) + ".hdf5"), 10, 1000 * (f + 1));
  const train::PretrainConfig c = config_for(dir.path.string(), train::DataSharding::batch);
  // Rank r of 3 builds rows [4r, 4r + 4) of each global batch of 12; together they build exactly
  // the batches one process with batch 12 reads.
  std::vector<std::vector<int32_t>> parts;
  for (int r = 0; r < 3; ++r) {
    const train::RankData d = train::plan_rank_data(c, {r, 3, r, 3});
    EXPECT_EQ(d.files.size(), 3u);
    EXPECT_EQ(d.loader_batch, 12);
    EXPECT_EQ(d.loader_seed, 7u);
    EXPECT_EQ(d.keep_begin, 4 * r);
    EXPECT_EQ(d.keep_end, 4 * r + 4);
    data::LoaderOptions lo;
    lo.files = d.files;
    lo.batch_size = d.loader_batch, lo.seed = d.loader_seed, lo.keep_begin = d.keep_begin, lo.keep_end = d.keep_end;
    lo.dynamic_masking = true;
    data::PretrainLoader loader(lo);
    parts.push_back(take_ids(loader, 4 * 7));  // 7 global batches: past the end of the 30 instances
  }
  const train::RankData one = train::plan_rank_data(c, {0, 1, 0, 1});
  EXPECT_EQ(one.keep_end, -1) << "one process keeps the whole batch";
  data::LoaderOptions lo;
  lo.files = one.files;
  lo.batch_size = 12, lo.seed = one.loader_seed, lo.dynamic_masking = true;
  data::PretrainLoader whole(lo);
  const std::vector<int32_t> all = take_ids(whole, 12 * 7);
  for (int b = 0; b < 7; ++b)
    for (int r = 0; r < 3; ++r)
      for (int i = 0; i < 4; ++i)
        EXPECT_EQ(parts[size_t(r)][size_t(b * 4 + i)], all[size_t(b * 12 + r * 4 + i)]) << "batch " << b << " rank " << r;
  lo.keep_begin = 5, lo.keep_end = 5;
  EXPECT_THROW(data::PretrainLoader{lo}, Error) << "an empty row range";
}

// DLE's files mode: within each epoch the ranks read disjoint shards that together are the whole
// dataset; the shards a rank reads change from epoch to epoch (the shared per-epoch shuffle).
TEST(RankData, FileShardingReadsDisjointShardsThatCoverTheData) {
  TempDir dir("rank_data");
  const int files = 5;
  for (int f = 0; f < files; ++f)
    write_numbered_shard(dir.file("shard_0000" + std::to_string(f) + ".hdf5"), 6 + f, 1000 * (f + 1));
  const train::PretrainConfig c = config_for(dir.path.string(), train::DataSharding::files);
  const int world = 2;
  std::set<std::set<int32_t>> files_of_rank0;  // per epoch, the shards (first id / 1000) rank 0 read
  for (int64_t epoch = 0; epoch < 4; ++epoch) {
    std::map<int32_t, int> owner;  // instance id -> the rank that read it this epoch
    for (int r = 0; r < world; ++r) {
      const train::RankData d = train::plan_rank_data(c, {r, world, r, world});
      EXPECT_EQ(d.loader_batch, 4) << "each rank reads its own batch";
      EXPECT_EQ(d.keep_end, -1);
      EXPECT_EQ(d.files.size(), size_t(files)) << "every rank lists every shard";
      train::RankData one_row = d;  // one instance per batch: the epoch boundary falls between batches
      one_row.loader_batch = 1;
      data::PretrainLoader loader = loader_of(one_row, {epoch, 0, 0});
      std::set<int32_t> shards_read;
      // This rank's share of the epoch: read until the loader reaches the next epoch.
      while (loader.position().epoch == epoch) {
        for (int32_t id : take_ids(loader, 1)) {
          auto [it, fresh] = owner.emplace(id, r);
          EXPECT_TRUE(fresh) << "instance " << id << " read twice in epoch " << epoch << " (ranks " << it->second
                             << " and " << r << ")";
          shards_read.insert(id / 1000);
        }
      }
      if (r == 0) files_of_rank0.insert(shards_read);
    }
    EXPECT_EQ(owner.size(), size_t(6 + 7 + 8 + 9 + 10)) << "epoch " << epoch << ": the ranks together read every instance once";
  }
  EXPECT_GT(files_of_rank0.size(), 1u) << "rank 0 read the same shards in every epoch";

  // More ranks than shards: an error that says so, on every rank.
  for (int r = 0; r < 6; ++r) {
    try {
      train::plan_rank_data(c, {r, 6, r, 6});
      ADD_FAILURE() << "6 ranks on 5 shards accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("5 shard(s) for 6 ranks"), std::string::npos) << e.what();
    }
  }
}

TEST(RankData, LocalShardingReadsEachRanksOwnPartAndRevisitsSmallPartsEvenly) {
  TempDir dir("rank_data");
  std::filesystem::create_directories(dir.path / "part0");
  std::filesystem::create_directories(dir.path / "part1");
  write_numbered_shard(dir.file("part0/a.hdf5"), 12, 1000);
  write_numbered_shard(dir.file("part0/b.hdf5"), 9, 2000);
  write_numbered_shard(dir.file("part1/a.hdf5"), 5, 3000);  // the small part
  const train::PretrainConfig c = config_for(dir.file("part{rank}"), train::DataSharding::local);
  const train::RankData d0 = train::plan_rank_data(c, {0, 2, 0, 2});
  const train::RankData d1 = train::plan_rank_data(c, {1, 2, 1, 2});
  EXPECT_EQ(d0.data, dir.file("part0"));
  EXPECT_EQ(d1.data, dir.file("part1"));
  EXPECT_EQ(d0.files.size(), 2u);
  ASSERT_EQ(d1.files.size(), 1u);
  EXPECT_NE(d0.loader_seed, d1.loader_seed);
  // V-SWIFT's resample-to-equal guarantee: while the large rank reads its 21 instances, the
  // small rank (5 instances) reads each of its own floor(21/5) = 4 or 5 times, never another's.
  data::PretrainLoader small = loader_of(d1);
  std::map<int32_t, int> seen;
  for (int32_t id : take_ids(small, 21)) ++seen[id];
  ASSERT_EQ(seen.size(), 5u);
  for (const auto& [id, times] : seen) {
    EXPECT_GE(id, 3000);
    EXPECT_LT(id, 3005);
    EXPECT_TRUE(times == 4 || times == 5) << "instance " << id << " read " << times << " times";
  }

  // Without {rank}, the ranks of a host share its directory: its shards are dealt between them.
  const train::PretrainConfig shared = config_for(dir.file("part0"), train::DataSharding::local);
  const train::RankData h0 = train::plan_rank_data(shared, {4, 8, 0, 2});
  const train::RankData h1 = train::plan_rank_data(shared, {5, 8, 1, 2});
  ASSERT_EQ(h0.files.size(), 1u);
  ASSERT_EQ(h1.files.size(), 1u);
  EXPECT_NE(h0.files[0], h1.files[0]);
  EXPECT_THROW(train::plan_rank_data(shared, {0, 3, 0, 3}), Error) << "2 shards for a host's 3 ranks";
  // {rank} with a mode that does not replace it, and a rank whose directory is missing.
  EXPECT_THROW(train::plan_rank_data(config_for(dir.file("part{rank}"), train::DataSharding::files), {0, 2, 0, 2}), Error);
  EXPECT_THROW(train::plan_rank_data(c, {2, 3, 2, 3}), Error) << "part2 does not exist";
}

TEST(RankData, ResumePositions) {
  train::TrainerState st;
  st.loader = {3, 1, 17};
  st.data_sharding = "files";
  st.rank_loaders = {{2, 0, 5}, {4, 1, 9}};
  std::string why;
  // Same sharding, same rank count: each rank continues where it was.
  EXPECT_EQ(train::rank_start_position(train::DataSharding::files, st, 1, 2, &why), (data::LoaderPosition{4, 1, 9}));
  EXPECT_TRUE(why.empty());
  // Another rank count: a new epoch past the furthest any rank had reached, and a reason.
  EXPECT_EQ(train::rank_start_position(train::DataSharding::files, st, 2, 3, &why), (data::LoaderPosition{5, 0, 0}));
  EXPECT_NE(why.find("on 2 rank(s)"), std::string::npos) << why;
  EXPECT_NE(why.find("epoch 5"), std::string::npos) << why;
  // batch sharding resumes its global position on any rank count...
  train::TrainerState b;
  b.loader = {1, 2, 3};
  why.clear();
  EXPECT_EQ(train::rank_start_position(train::DataSharding::batch, b, 0, 5, &why), (data::LoaderPosition{1, 2, 3}));
  EXPECT_TRUE(why.empty());
  // ...but not a files checkpoint's, nor files a batch checkpoint's.
  EXPECT_EQ(train::rank_start_position(train::DataSharding::batch, st, 0, 2, &why), (data::LoaderPosition{5, 0, 0}));
  EXPECT_FALSE(why.empty());
  why.clear();
  EXPECT_EQ(train::rank_start_position(train::DataSharding::local, b, 0, 2, &why), (data::LoaderPosition{2, 0, 0}));
  EXPECT_FALSE(why.empty());
}

}  // namespace
}  // namespace unmask
