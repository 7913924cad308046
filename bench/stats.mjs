// SPDX-License-Identifier: MIT
// Percentiles of a list of times as the benchmarks print them: interpolated between ranks,
// rounded to the microsecond (times in ms).
export function stats(v) {
  const s = [...v].sort((a, b) => a - b);
  const q = (p) => {
    const x = p * (s.length - 1);
    const lo = Math.floor(x);
    const hi = Math.ceil(x);
    return s[lo] + (s[hi] - s[lo]) * (x - lo);
  };
  const r3 = (x) => Math.round(x * 1000) / 1000;
  return {
    n: s.length, p50: r3(q(0.5)), p90: r3(q(0.9)), p99: r3(q(0.99)), max: r3(s[s.length - 1]),
    mean: r3(s.reduce((a, b) => a + b, 0) / s.length),
  };
}
