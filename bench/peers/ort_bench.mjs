#!/usr/bin/env node
// onnxruntime-node CPU latency benchmark for the BERT ONNX made by export_onnx.py.
//
//   cd bench/peers && npm install --ignore-scripts      # onnxruntime-node 1.30.0, CPU libonnxruntime.so
//   node bench/peers/ort_bench.mjs --model /tmp/unmask-bench/bert-base.onnx --batch 1,8 --seq 128 --threads 2
//   node bench/peers/ort_bench.mjs --model ... --batch 32 --seq 128 --lengths uniform:16:128
//
// SessionOptions: intraOpNumThreads = --threads (default 2), interOpNumThreads 1,
// graphOptimizationLevel 'all', executionMode 'sequential'.  For each (batch, seq): one input batch
// (seeded), --warmup runs, then up to --iters timed runs (stopping early after --max-seconds once
// 3 runs are done); prints one JSON row per setting with the median latency:
//   {"engine":"onnxruntime","batch":B,"seq":T,"latency_ms":..,"qps":B/latency_s,"threads":N,...}
// Full batches: every row has `seq` real tokens, attention_mask all ones.  --lengths uniform:LO:HI:
// per-row lengths drawn uniformly from [LO, HI] with the shared LCG below (same in torch_bench.py),
// the batch padded to the longest row, attention_mask marking the real tokens; `seq` reports the
// padded length.
import { createRequire } from 'module';
import path from 'path';
import { fileURLToPath } from 'url';

const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(path.join(here, 'package.json'));
const ort = require('onnxruntime-node');

function parseArgs(argv) {
  const a = { batch: '1,8', seq: '128', threads: 2, iters: 10, warmup: 2, maxSeconds: 20, seed: 0, lengths: null };
  for (let i = 0; i < argv.length; i++) {
    const k = argv[i];
    const v = () => { if (i + 1 >= argv.length) throw new Error(`${k} needs a value`); return argv[++i]; };
    switch (k) {
      case '--model': a.model = v(); break;
      case '--batch': a.batch = v(); break;
      case '--seq': a.seq = v(); break;
      case '--threads': a.threads = parseInt(v(), 10); break;
      case '--iters': a.iters = parseInt(v(), 10); break;
      case '--warmup': a.warmup = parseInt(v(), 10); break;
      case '--max-seconds': a.maxSeconds = parseFloat(v()); break;
      case '--seed': a.seed = parseInt(v(), 10); break;
      case '--lengths': a.lengths = v(); break;
      case '-h': case '--help':
        console.log('usage: ort_bench.mjs --model M.onnx [--batch 1,8] [--seq 128] [--threads 2] [--iters 10] ' +
                    '[--warmup 2] [--max-seconds 20] [--lengths uniform:LO:HI] [--seed 0]');
        process.exit(0);
      default: throw new Error(`unknown argument ${k}`);
    }
  }
  if (!a.model) throw new Error('--model is required');
  return a;
}

// 32-bit LCG (Numerical Recipes constants); identical sequence in torch_bench.py.
function makeLcg(seed) {
  let s = seed >>> 0;
  return () => { s = (Math.imul(1664525, s) + 1013904223) >>> 0; return s; };
}

// -> {ids, mask, tt (BigInt64Array), T (padded length), lens}
export function makeBatch(B, seq, lengths, seed) {
  const next = makeLcg(seed);
  let lens;
  if (lengths) {
    const m = /^uniform:(\d+):(\d+)$/.exec(lengths);
    if (!m) throw new Error(`bad --lengths ${lengths} (want uniform:LO:HI)`);
    const lo = +m[1], hi = +m[2];
    lens = Array.from({ length: B }, () => lo + Math.floor(next() / 4294967296 * (hi - lo + 1)));
  } else {
    lens = new Array(B).fill(seq);
  }
  const T = Math.max(...lens);
  const ids = new BigInt64Array(B * T), mask = new BigInt64Array(B * T), tt = new BigInt64Array(B * T);
  for (let b = 0; b < B; b++) {
    for (let t = 0; t < lens[b]; t++) {
      const id = t === 0 ? 101 : t === lens[b] - 1 ? 102 : 1000 + (next() % 29000);
      ids[b * T + t] = BigInt(id);
      mask[b * T + t] = 1n;
    }
  }
  return { ids, mask, tt, T, lens };
}

async function main() {
  const a = parseArgs(process.argv.slice(2));
  const sess = await ort.InferenceSession.create(a.model, {
    intraOpNumThreads: a.threads, interOpNumThreads: 1, graphOptimizationLevel: 'all',
    executionMode: 'sequential',
  });
  const batches = a.batch.split(',').map(Number);
  const seqs = a.seq.split(',').map(Number);
  for (const seq of seqs) {
    for (const B of batches) {
      const { ids, mask, tt, T, lens } = makeBatch(B, seq, a.lengths, a.seed);
      const feeds = {
        input_ids: new ort.Tensor('int64', ids, [B, T]),
        attention_mask: new ort.Tensor('int64', mask, [B, T]),
        token_type_ids: new ort.Tensor('int64', tt, [B, T]),
      };
      for (let i = 0; i < a.warmup; i++) await sess.run(feeds);
      const times = [];
      const start = process.hrtime.bigint();
      for (let i = 0; i < a.iters; i++) {
        const t0 = process.hrtime.bigint();
        await sess.run(feeds);
        times.push(Number(process.hrtime.bigint() - t0) / 1e6);
        if (times.length >= 3 && Number(process.hrtime.bigint() - start) / 1e9 > a.maxSeconds) break;
      }
      times.sort((x, y) => x - y);
      const n = times.length;
      const med = n % 2 ? times[(n - 1) / 2] : (times[n / 2 - 1] + times[n / 2]) / 2;
      const row = { engine: 'onnxruntime', batch: B, seq: T, latency_ms: +med.toFixed(3),
                    qps: +(B / (med / 1000)).toFixed(3), threads: a.threads, iters: n,
                    min_ms: +times[0].toFixed(3) };
      if (a.lengths) { row.lengths = a.lengths; row.tokens = lens.reduce((x, y) => x + y, 0); }
      console.log(JSON.stringify(row));
    }
  }
}

main().catch((e) => { console.error(e.stack || String(e)); process.exit(1); });
