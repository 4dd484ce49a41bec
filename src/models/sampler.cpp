#include "models/sampler.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/error.h"

namespace cbx {

namespace {
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Order-preserving float -> uint32 (a larger float gives a larger key; -0 sits just below
// +0, which no comparison below can tell apart) and back.
inline uint32_t order_key(float v) {
  uint32_t u;
  std::memcpy(&u, &v, 4);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
inline float key_value(uint32_t k) {
  const uint32_t u = (k & 0x80000000u) ? (k & 0x7fffffffu) : ~k;
  float v;
  std::memcpy(&v, &u, 4);
  return v;
}

// The k-th largest (1 <= k <= n) of x[0, n), exactly: a most-significant-byte-first radix
// select, each pass keeping the keys of the byte bucket that holds the k-th; a, b: n keys
// of scratch each. ~4 light passes instead of a copy + nth_element (~4x faster at 6563).
float kth_largest(const float* x, int64_t n, int64_t k, uint32_t* a, uint32_t* b) {
  for (int64_t i = 0; i < n; ++i) a[i] = order_key(x[i]);
  int64_t cnt = n, rank = k;  // the rank-th largest of a[0, cnt)
  for (int shift = 24; shift >= 0 && cnt > 1; shift -= 8) {
    int64_t hist[256] = {};
    for (int64_t i = 0; i < cnt; ++i) ++hist[(a[i] >> shift) & 255u];
    uint32_t bucket = 255;
    for (; bucket > 0 && rank > hist[bucket]; --bucket) rank -= hist[bucket];
    if (hist[bucket] == cnt) continue;  // every key has this byte: nothing to drop
    int64_t m = 0;
    for (int64_t i = 0; i < cnt; ++i)
      if (((a[i] >> shift) & 255u) == bucket) b[m++] = a[i];
    std::swap(a, b);
    cnt = m;
  }
  // All keys left agree on the bytes examined; the remaining low bytes still differ only
  // when a pass was cut short by cnt == 1, and then a[0] is the answer.
  return key_value(a[0]);
}

// HF TopPLogitsWarper (min_tokens_to_keep = 1) on s[0, vocab) in place. -inf logits sort
// first with probability 0, so they are removed either way: only the finite ones are
// sorted, ascending, by a stable LSD radix sort (equal logits in id order). order, order2:
// vocab ids of scratch; keys: 2 vocab; work: vocab floats.
void top_p_filter(float* s, int32_t vocab, double top_p, int32_t* order, int32_t* order2, uint32_t* keys, float* work) {
  int64_t n = 0;
  float mx = kNegInf;
  uint32_t* k1 = keys;
  uint32_t* k2 = keys + vocab;
  for (int32_t i = 0; i < vocab; ++i)
    if (s[i] != kNegInf) {
      order[n] = i;
      k1[n++] = order_key(s[i]);
      mx = std::max(mx, s[i]);
    }
  if (n == 0) return;
  for (int shift = 0; shift < 32; shift += 8) {
    int64_t pos[256] = {};
    for (int64_t j = 0; j < n; ++j) ++pos[(k1[j] >> shift) & 255u];
    if (pos[(k1[0] >> shift) & 255u] == n) continue;  // one bucket: already in order
    int64_t at = 0;
    for (int64_t& p : pos) {
      const int64_t c = p;
      p = at;
      at += c;
    }
    for (int64_t j = 0; j < n; ++j) {
      const int64_t t = pos[(k1[j] >> shift) & 255u]++;
      k2[t] = k1[j];
      order2[t] = order[j];
    }
    std::swap(k1, k2);
    std::swap(order, order2);
  }
  double sum = 0;
  for (int64_t j = 0; j < n; ++j) {
    const float e = std::exp(s[order[j]] - mx);
    work[j] = e;
    sum += e;
  }
  // Python forms 1 - top_p in double; the comparison with the f32 tensor rounds it to f32.
  const float thr = float(1.0 - top_p);
  const float inv = float(1.0 / sum);
  double cum = 0;
  for (int64_t j = 0; j + 1 < n; ++j) {  // the largest is always kept
    cum += double(work[j] * inv);
    if (float(cum) <= thr)
      s[order[j]] = kNegInf;
    else
      break;  // cumulative sums only grow
  }
}

// HF RepetitionPenaltyLogitsProcessor on s[0, vocab) in place: each distinct id of history once,
// logit / r when positive, else logit * r. seen / stamp mark the ids met (a new stamp a call;
// the stamps are cleared when it wraps).
void repetition_penalty(float* s, int32_t vocab, float r, const int32_t* history, int64_t n_history, uint32_t* seen,
                        uint32_t& stamp) {
  if (r == 1.f || n_history <= 0) return;
  if (++stamp == 0) {  // wrapped: clear the stamps
    std::fill(seen, seen + vocab, 0u);
    stamp = 1;
  }
  for (int64_t j = 0; j < n_history; ++j) {
    const int32_t id = history[j];
    CBX_CHECK(id >= 0 && id < vocab, "sampler: history id %d outside the vocabulary of %d", id, vocab);
    if (seen[size_t(id)] == stamp) continue;
    seen[size_t(id)] = stamp;
    float& v = s[size_t(id)];
    v = v < 0.f ? v * r : v / r;
  }
}

// The last step of both chains on processed logits s[0, vocab): -1 when all are -inf; greedy:
// the argmax (first index on ties); else softmax and one multinomial draw from rng (prob: vocab
// doubles of scratch).
int32_t pick_token(const float* s, int32_t vocab, bool greedy, Rng& rng, double* prob) {
  int32_t best = 0;
  for (int32_t i = 1; i < vocab; ++i)
    if (s[i] > s[best]) best = i;
  if (s[best] == kNegInf) return -1;
  if (greedy) return best;
  const float mx = s[best];
  double sum = 0;
  for (int32_t i = 0; i < vocab; ++i) {
    const double e = s[i] == kNegInf ? 0.0 : std::exp(double(s[i]) - double(mx));
    prob[size_t(i)] = e;
    sum += e;
  }
  const double u = rng.uniform() * sum;
  double cum = 0;
  int32_t last = best;
  for (int32_t i = 0; i < vocab; ++i) {
    if (prob[size_t(i)] == 0.0) continue;
    cum += prob[size_t(i)];
    last = i;
    if (u < cum) return i;
  }
  return last;  // rounding left u at the very top
}

bool any_finite(const std::vector<float>& s) {
  for (float v : s)
    if (v != kNegInf) return true;
  return false;
}

uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
}  // namespace

void Rng::reseed(uint64_t seed) {
  uint64_t x = seed;
  for (uint64_t& s : s_) s = splitmix64(x);
}

uint64_t Rng::next_u64() {
  const uint64_t result = rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

double Rng::uniform() { return double(next_u64() >> 11) * 0x1.0p-53; }

TurboSampler::TurboSampler(int32_t vocab, const SamplerParams& p) : vocab_(vocab), p_(p), rng_(p.seed) {
  CBX_CHECK(vocab > 0, "sampler: vocabulary size %d", vocab);
  CBX_CHECK(std::isfinite(p.temperature) && p.temperature >= 0.f, "sampler: temperature %g", double(p.temperature));
  CBX_CHECK(p.top_k >= 0, "sampler: top_k %d", p.top_k);
  CBX_CHECK(p.top_p > 0.0 && p.top_p <= 1.0, "sampler: top_p %g outside (0, 1]", p.top_p);
  CBX_CHECK(std::isfinite(p.repetition_penalty) && p.repetition_penalty > 0.f,
            "sampler: repetition_penalty %g must be > 0", double(p.repetition_penalty));
  proc_.resize(size_t(vocab));
  work_.resize(size_t(vocab));
  order_.resize(size_t(vocab));
  order2_.resize(size_t(vocab));
  keys_.resize(2 * size_t(vocab));
  prob_.resize(size_t(vocab));
  seen_.assign(size_t(vocab), 0);
}

// HF TopKLogitsWarper: remove logits < the k-th largest (ties with it stay).
void TurboSampler::top_k() {
  const int64_t k = std::min<int64_t>(std::max(p_.top_k, 1), vocab_);
  if (k >= vocab_) return;
  const float kth = kth_largest(proc_.data(), vocab_, k, keys_.data(), keys_.data() + vocab_);
  for (float& v : proc_) v = v < kth ? kNegInf : v;  // a select, not a branch: vectorizes
}

// HF TopPLogitsWarper (top_p_filter).
void TurboSampler::top_p() {
  top_p_filter(proc_.data(), vocab_, p_.top_p, order_.data(), order2_.data(), keys_.data(), work_.data());
}

bool TurboSampler::process(const float* logits, const int32_t* history, int64_t n_history) {
  const float T = p_.temperature;
  if (T > 0.f && T != 1.f)
    for (int32_t i = 0; i < vocab_; ++i) proc_[size_t(i)] = logits[i] / T;
  else
    std::copy(logits, logits + vocab_, proc_.begin());
  if (p_.top_k > 0) top_k();
  if (p_.top_p < 1.0) top_p();
  repetition_penalty(proc_.data(), vocab_, p_.repetition_penalty, history, n_history, seen_.data(), stamp_);
  return any_finite(proc_);
}

int32_t TurboSampler::pick() { return pick_token(proc_.data(), vocab_, p_.greedy, rng_, prob_.data()); }

int32_t TurboSampler::sample(const float* logits, const int32_t* history, int64_t n_history) {
  if (!process(logits, history, n_history)) return -1;
  return pick();
}

// ---- Multilingual order ----

MtlSampler::MtlSampler(int32_t vocab, const MtlSamplerParams& p) : vocab_(vocab), p_(p), rng_(p.seed) {
  CBX_CHECK(vocab > 0, "sampler: vocabulary size %d", vocab);
  CBX_CHECK(std::isfinite(p.cfg_weight), "sampler: cfg_weight %g", double(p.cfg_weight));
  CBX_CHECK(std::isfinite(p.temperature) && p.temperature > 0.f, "sampler: temperature %g must be > 0",
            double(p.temperature));
  CBX_CHECK(p.min_p >= 0.f && p.min_p <= 1.f, "sampler: min_p %g outside [0, 1]", double(p.min_p));
  CBX_CHECK(p.top_p > 0.0 && p.top_p <= 1.0, "sampler: top_p %g outside (0, 1]", p.top_p);
  CBX_CHECK(std::isfinite(p.repetition_penalty) && p.repetition_penalty > 0.f,
            "sampler: repetition_penalty %g must be > 0", double(p.repetition_penalty));
  cfg_.resize(size_t(vocab));
  proc_.resize(size_t(vocab));
  work_.resize(size_t(vocab));
  order_.resize(size_t(vocab));
  order2_.resize(size_t(vocab));
  keys_.resize(2 * size_t(vocab));
  prob_.resize(size_t(vocab));
  seen_.assign(size_t(vocab), 0);
}

// HF MinPLogitsWarper: probabilities from the softmax of the current logits; drop those
// below min_p * the largest (the top token always stays).
void MtlSampler::min_p() {
  float mx = kNegInf;
  for (float v : proc_) mx = std::max(mx, v);
  if (mx == kNegInf) return;
  float sum = 0;
  for (int32_t i = 0; i < vocab_; ++i) {
    const float e = proc_[size_t(i)] == kNegInf ? 0.f : std::exp(proc_[size_t(i)] - mx);
    work_[size_t(i)] = e;
    sum += e;
  }
  const float inv = 1.f / sum;
  const float thr = p_.min_p * inv;  // min_p * max prob (the max has e = 1)
  for (int32_t i = 0; i < vocab_; ++i)
    if (work_[size_t(i)] * inv < thr) proc_[size_t(i)] = kNegInf;
}

// HF TopPLogitsWarper (top_p_filter, as TurboSampler::top_p).
void MtlSampler::top_p() {
  top_p_filter(proc_.data(), vocab_, p_.top_p, order_.data(), order2_.data(), keys_.data(), work_.data());
}

bool MtlSampler::process(const float* cond, const float* uncond, const int32_t* history, int64_t n_history) {
  const float w = p_.cfg_weight;
  if (uncond)
    for (int32_t i = 0; i < vocab_; ++i) cfg_[size_t(i)] = cond[i] + w * (cond[i] - uncond[i]);
  else
    std::copy(cond, cond + vocab_, cfg_.begin());
  std::copy(cfg_.begin(), cfg_.end(), proc_.begin());
  repetition_penalty(proc_.data(), vocab_, p_.repetition_penalty, history, n_history, seen_.data(), stamp_);
  const float T = p_.temperature;
  if (T != 1.f)
    for (float& v : proc_) v /= T;
  if (p_.min_p > 0.f) min_p();
  if (p_.top_p < 1.0) top_p();
  return any_finite(proc_);
}

int32_t MtlSampler::pick() { return pick_token(proc_.data(), vocab_, p_.greedy, rng_, prob_.data()); }

}  // namespace cbx
