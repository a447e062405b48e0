# tests/lib/tiny_corpus.sh: the tiny text corpus the shell tests train on; sourced by
# tests/cli/test_train_cli.sh, tests/mpi/test_dp_pretrain.sh, tests/mpi/test_srun.sh and
# bench/gpu/run_full_build.sh.
#
#   write_tiny_corpus DIR      DIR/vocab.txt: [PAD] [UNK] [CLS] [SEP] [MASK] tok0 .. tok194;
#                              DIR/corpus.txt: 40 documents of 4-8 sentences of 4-13 tokens, blank
#                              lines between documents, the same text for every caller (RANDOM=7)
#   write_dp_config DIR        DIR/dp.toml: random:tiny on DIR/shards (seq 32, 5 predictions), 8
#                              steps of batch 6 x accumulation 2, dropout off, checkpoint every 2
#                              steps, output DIR/run: the data-parallel equivalence runs' config

write_tiny_corpus() {
  local dir=$1 line
  { printf '[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n'; for i in $(seq 0 194); do echo "tok$i"; done; } > "$dir/vocab.txt"
  # Every RANDOM is read in this shell: one inside $(...) is read in a subshell, which bash
  # (5.1 and later) seeds afresh, so the text used to change from call to call.
  local d s w n m
  RANDOM=7
  for ((d = 0; d < 40; d++)); do
    n=$((4 + RANDOM % 5))
    for ((s = 0; s < n; s++)); do
      line=""
      m=$((4 + RANDOM % 10))
      for ((w = 0; w < m; w++)); do line+="tok$((RANDOM % 195)) "; done
      echo "$line."
    done
    echo
  done > "$dir/corpus.txt"
}

write_dp_config() {
  local dir=$1
  cat > "$dir/dp.toml" <<EOT
model = "random:tiny"
vocab = "$dir/vocab.txt"
data = "$dir/shards"
output = "$dir/run"
steps = 8
batch = 6
accumulation = 2
max_seq = 32
max_pred = 5
lr = 1e-3
warmup = 0.25
checkpoint_every = 2
threads = 1
log_every = 1
peak_gflops = 1
hidden_dropout = 0
attention_dropout = 0
EOT
}
