/* C API (include/chatterbox.h) checked from C on a tiny synthetic Turbo model.
 * Voices (cbx_voice_*, cbx_synthesize_voice) on the same tiny models.
 * Usage: test_c_api BUILD_DIR   (exit 77 = skipped: chatterbox / chatterbox-mkckpt not built) */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "chatterbox.h"

static int g_failures = 0;
#define CHECK(cond)                                                                                               \
  do {                                                                                                            \
    if (!(cond)) {                                                                                                \
      fprintf(stderr, "%s:%d: CHECK failed: %s (last error: %s)\n", __FILE__, __LINE__, #cond, cbx_last_error()); \
      ++g_failures;                                                                                               \
    }                                                                                                             \
  } while (0)

typedef struct {
  size_t n_samples;
  int calls;
  int abort_after; /* polls before aborting; < 0 = never */
  int polls;
} cb_state;

/* The call failed with CBX_ERR_INVALID_ARGUMENT and exactly the shared validator's message
 * (pipeline/synth_options.h, the same words `chatterbox say` prints); printed on stdout as
 * "invalid: MESSAGE" so a shell test can compare it with the CLI's stderr. */
static void expect_invalid(cbx_status got, const char* want, int line) {
  printf("invalid: %s\n", cbx_last_error());
  if (got != CBX_ERR_INVALID_ARGUMENT || strcmp(cbx_last_error(), want) != 0) {
    fprintf(stderr, "%s:%d: want CBX_ERR_INVALID_ARGUMENT \"%s\"\n  got status %d \"%s\"\n", __FILE__, line, want,
            (int)got, cbx_last_error());
    ++g_failures;
  }
}

static cbx_status synth_once(cbx_model* m, const cbx_synth_params* sp) {
  float* x = (float*)1;
  size_t n = 3;
  const cbx_status s = cbx_synthesize(m, "Hello.", sp, &x, &n, NULL);
  if (s != CBX_OK) CHECK(x == NULL && n == 0);
  cbx_audio_free(s == CBX_OK ? x : NULL);
  return s;
}

static cbx_status load_once(const char* gguf, const cbx_model_params* mp) {
  cbx_model* m = (cbx_model*)1;
  const cbx_status s = cbx_model_load(gguf, mp, &m);
  if (s != CBX_OK) CHECK(m == NULL);
  cbx_model_free(s == CBX_OK ? m : NULL);
  return s;
}

/* Every value outside a parameter's range, NaN and Inf are refused: no value silently means
 * "the default" (only CBX_DEFAULT_INT / CBX_DEFAULT_FLOAT do). */
static void test_invalid_params(cbx_model* m, const char* gguf) {
  cbx_synth_params d = cbx_synth_default_params();
  CHECK(d.temperature == CBX_DEFAULT_FLOAT && d.top_p == CBX_DEFAULT_FLOAT && d.top_k == CBX_DEFAULT_INT &&
        d.repetition_penalty == CBX_DEFAULT_FLOAT && d.max_chunk_tokens == CBX_DEFAULT_INT &&
        d.min_p == CBX_DEFAULT_FLOAT && d.cfg_weight == CBX_DEFAULT_FLOAT && d.exaggeration == CBX_DEFAULT_FLOAT);
  cbx_model_params dm = cbx_model_default_params();
  CHECK(dm.n_threads == CBX_DEFAULT_INT && dm.max_new_tokens == CBX_DEFAULT_INT && dm.kv_type == CBX_KV_F16);

  cbx_synth_params sp;
#define SYNTH_INVALID(field, value, want) \
  sp = cbx_synth_default_params();        \
  sp.field = value;                       \
  expect_invalid(synth_once(m, &sp), want, __LINE__)
  SYNTH_INVALID(temperature, -1, "temperature (--temperature) must be in (0, 10], got -1");
  SYNTH_INVALID(temperature, NAN, "temperature (--temperature) must be in (0, 10], got nan");
  SYNTH_INVALID(temperature, INFINITY, "temperature (--temperature) must be in (0, 10], got inf");
  SYNTH_INVALID(temperature, 0, "temperature (--temperature) must be in (0, 10], got 0");
  SYNTH_INVALID(top_p, -0.5f, "top_p (--top-p) must be in (0, 1], got -0.5");
  SYNTH_INVALID(top_p, 1.5f, "top_p (--top-p) must be in (0, 1], got 1.5");
  SYNTH_INVALID(top_k, -5, "top_k (--top-k) must be in [0, 100000], got -5");
  SYNTH_INVALID(repetition_penalty, -2, "repetition_penalty (--repetition-penalty) must be in (0, 10], got -2");
  SYNTH_INVALID(repetition_penalty, 0, "repetition_penalty (--repetition-penalty) must be in (0, 10], got 0");
  /* the Multilingual-only fields are checked on a Turbo model too */
  SYNTH_INVALID(cfg_weight, -1, "cfg_weight (--cfg-weight) must be in [0, 100], got -1");
  SYNTH_INVALID(exaggeration, -3, "exaggeration (--exaggeration) must be in [0, 100], got -3");
  SYNTH_INVALID(min_p, NAN, "min_p (--min-p) must be in [0, 1], got nan");
  SYNTH_INVALID(max_chunk_tokens, 0, "max_chunk_tokens (--chunk-tokens) must be in [1, 100000], got 0");
  SYNTH_INVALID(max_chunk_tokens, -1, "max_chunk_tokens (--chunk-tokens) must be in [1, 100000], got -1");
  /* the model's own limit: the text tokens its T3 takes */
  sp = cbx_synth_default_params();
  sp.max_chunk_tokens = 5000;
  CHECK(synth_once(m, &sp) == CBX_ERR_INVALID_ARGUMENT);
  printf("invalid: %s\n", cbx_last_error());
  CHECK(strstr(cbx_last_error(), "max_chunk_tokens (--chunk-tokens) must be in [1, ") &&
        strstr(cbx_last_error(), "(the text tokens this model's T3 takes), got 5000"));
  sp.language = "de";
  expect_invalid(synth_once(m, &sp),
                 "language (--lang): a turbo model speaks English only (en); 'de' needs a Multilingual model",
                 __LINE__);
#undef SYNTH_INVALID

  cbx_model_params mp;
#define LOAD_INVALID(field, value, want) \
  mp = cbx_model_default_params();       \
  mp.field = value;                      \
  expect_invalid(load_once(gguf, &mp), want, __LINE__)
  LOAD_INVALID(n_threads, 0, "n_threads (--threads) must be in [1, 1024], got 0");
  LOAD_INVALID(n_threads, -1, "n_threads (--threads) must be in [1, 1024], got -1");
  LOAD_INVALID(n_threads, 1025, "n_threads (--threads) must be in [1, 1024], got 1025");
  LOAD_INVALID(max_new_tokens, 0, "max_new_tokens (--max-tokens) must be in [1, 100000], got 0");
  LOAD_INVALID(max_new_tokens, -1, "max_new_tokens (--max-tokens) must be in [1, 100000], got -1");
  LOAD_INVALID(kv_type, 7, "kv_type (--kv-type) must be CBX_KV_F16 or CBX_KV_F32 (f16 or f32), got 7");
  LOAD_INVALID(gemm_precision, 3,
               "gemm_precision (--gemm-precision) must be CBX_GEMM_DEFAULT, CBX_GEMM_F32 or CBX_GEMM_BF16 (auto, f32 "
               "or bf16), got 3");
  LOAD_INVALID(gemm_precision, -1,
               "gemm_precision (--gemm-precision) must be CBX_GEMM_DEFAULT, CBX_GEMM_F32 or CBX_GEMM_BF16 (auto, f32 "
               "or bf16), got -1");
  LOAD_INVALID(cfm_precision, 4,
               "cfm_precision (--cfm-precision) must be CBX_GEMM_DEFAULT, CBX_GEMM_F32, CBX_GEMM_BF16 or "
               "CBX_GEMM_INT8 (auto, f32, bf16 or int8), got 4");
  LOAD_INVALID(cfm_precision, -1,
               "cfm_precision (--cfm-precision) must be CBX_GEMM_DEFAULT, CBX_GEMM_F32, CBX_GEMM_BF16 or "
               "CBX_GEMM_INT8 (auto, f32, bf16 or int8), got -1");
#undef LOAD_INVALID
  /* the model's own limit: its T3 positions, checked at load */
  mp = cbx_model_default_params();
  mp.n_threads = 1;
  mp.max_new_tokens = 99999;
  CHECK(load_once(gguf, &mp) == CBX_ERR_INVALID_ARGUMENT);
  printf("invalid: %s\n", cbx_last_error());
  CHECK(strstr(cbx_last_error(), "max_new_tokens (--max-tokens) must be in [1, ") &&
        strstr(cbx_last_error(), "(this model's T3 positions), got 99999"));

  /* voices: the same rule */
  cbx_voice_params vp;
  cbx_voice* v = NULL;
#define VOICE_INVALID(field, value, want)                                           \
  vp = cbx_voice_default_params();                                                  \
  vp.field = value;                                                                 \
  expect_invalid(cbx_voice_create(m, "/nonexistent.wav", &vp, &v), want, __LINE__); \
  CHECK(v == NULL)
  CHECK(cbx_voice_default_params().exaggeration == CBX_DEFAULT_FLOAT &&
        cbx_voice_default_params().max_seconds == CBX_DEFAULT_FLOAT);
  VOICE_INVALID(exaggeration, -1, "exaggeration (--exaggeration) must be in [0, 100], got -1");
  VOICE_INVALID(max_seconds, 0, "max_seconds (--max-seconds) must be in [10, 600], got 0");
  VOICE_INVALID(max_seconds, NAN, "max_seconds (--max-seconds) must be in [10, 600], got nan");
  VOICE_INVALID(norm_loudness, 2, "norm_loudness (--no-norm-loudness) must be 0 or 1, got 2");
#undef VOICE_INVALID
}

static int on_audio(const float* s, size_t n, int32_t sr, void* user) {
  cb_state* st = (cb_state*)user;
  (void)s;
  if (sr != 24000) return 1;
  st->n_samples += n;
  st->calls++;
  return 0;
}

static int should_abort(void* user) {
  cb_state* st = (cb_state*)user;
  st->polls++;
  return st->abort_after >= 0 && st->polls > st->abort_after;
}

/* A 16-bit PCM WAV (stereo, 44.1 kHz) of a voiced synthetic signal: harmonics of a gliding f0
 * under a syllable-rate envelope. Returns 0 on success. */
static int write_test_wav(const char* path, double seconds) {
  const int rate = 44100, ch = 2;
  const uint32_t n = (uint32_t)(seconds * rate), data = n * ch * 2;
  FILE* f = fopen(path, "wb");
  if (!f) return -1;
  uint8_t h[44];
  memcpy(h, "RIFF", 4);
  const uint32_t riff = 36 + data, fmt_size = 16, byte_rate = rate * ch * 2;
  const uint16_t pcm = 1, channels = ch, block = ch * 2, bits = 16;
  const uint32_t sr = rate;
  memcpy(h + 4, &riff, 4);
  memcpy(h + 8, "WAVEfmt ", 8);
  memcpy(h + 16, &fmt_size, 4);
  memcpy(h + 20, &pcm, 2);
  memcpy(h + 22, &channels, 2);
  memcpy(h + 24, &sr, 4);
  memcpy(h + 28, &byte_rate, 4);
  memcpy(h + 32, &block, 2);
  memcpy(h + 34, &bits, 2);
  memcpy(h + 36, "data", 4);
  memcpy(h + 40, &data, 4);
  fwrite(h, 1, 44, f);
  double phase = 0;
  for (uint32_t i = 0; i < n; ++i) {
    const double t = (double)i / rate;
    phase += 2 * 3.14159265358979323846 * (120 + 20 * sin(2 * 3.14159265358979323846 * 3 * t)) / rate;
    double x = 0;
    for (int k = 1; k < 8; ++k) x += 0.3 / k * sin(k * phase);
    x *= 0.5 + 0.5 * sin(2 * 3.14159265358979323846 * 4 * t);
    const int16_t v = (int16_t)lrint(x * 32767 * 0.9);
    for (int c = 0; c < ch; ++c) fwrite(&v, 2, 1, f);
  }
  return fclose(f) == 0 ? 0 : -1;
}

/* Voices through the C API on the tiny Turbo model (gguf): create from a file and from memory,
 * save/load, synthesize with a voice (deterministic, lossless through a .voice, different from
 * the built-in voice, which later plain calls still use), and the errors. */
/* Streaming on the tiny Turbo model (gguf) and the Multilingual one (mtl_gguf): several pieces
 * whose total is the non-streamed length (Multilingual: tail trim included), determinism, bad
 * schedules, a stop between pieces. */
static void test_stream(const char* gguf, const char* mtl_gguf) {
  cbx_model_params mp = cbx_model_default_params();
  mp.n_threads = 2;
  mp.max_new_tokens = 60;
  cbx_model* m = NULL;
  CHECK(cbx_model_load(gguf, &mp, &m) == CBX_OK);
  if (!m) return;
  cbx_synth_params sp = cbx_synth_default_params();
  CHECK(sp.stream == 0 && sp.stream_first_tokens == CBX_DEFAULT_INT && sp.stream_context_tokens == CBX_DEFAULT_INT);
  sp.seed = 3;
  float* a = NULL;
  size_t na = 0;
  CHECK(cbx_synthesize(m, "Hello stream.", &sp, &a, &na, NULL) == CBX_OK && na > 0);
  sp.stream = 1;
  sp.stream_first_tokens = 10;
  sp.stream_chunk_tokens = 12;
  cb_state st;
  memset(&st, 0, sizeof st);
  st.abort_after = -1;
  cbx_callbacks cb;
  memset(&cb, 0, sizeof cb);
  cb.struct_size = sizeof cb;
  cb.on_audio = on_audio;
  cb.should_abort = should_abort;
  cb.user_data = &st;
  float* b = NULL;
  size_t nb = 0;
  CHECK(cbx_synthesize(m, "Hello stream.", &sp, &b, &nb, &cb) == CBX_OK);
  CHECK(nb == na && st.n_samples == nb && st.calls >= 3);
  /* deterministic per seed */
  float* c = NULL;
  size_t nc = 0;
  CHECK(cbx_synthesize(m, "Hello stream.", &sp, &c, &nc, NULL) == CBX_OK);
  CHECK(nc == nb && b && c && memcmp(b, c, nb * sizeof(float)) == 0);
  cbx_audio_free(c); /* the failing calls below set c to NULL */
  c = NULL;
  /* the whole context kept (0), audio through the callback only */
  cb_state st2;
  memset(&st2, 0, sizeof st2);
  st2.abort_after = -1;
  cb.user_data = &st2;
  cb.should_abort = NULL;
  sp.stream_context_tokens = 0; /* keep all */
  CHECK(cbx_synthesize(m, "Hello stream.", &sp, NULL, NULL, &cb) == CBX_OK && st2.calls >= 3);
  sp.stream_context_tokens = -1;
  CHECK(cbx_synthesize(m, "Hello stream.", &sp, &c, &nc, NULL) == CBX_ERR_INVALID_ARGUMENT);
  CHECK(strstr(cbx_last_error(), "context_tokens") != NULL);
  sp.stream_context_tokens = CBX_DEFAULT_INT;
  sp.stream_first_tokens = 0;
  CHECK(cbx_synthesize(m, "Hello stream.", &sp, &c, &nc, NULL) == CBX_ERR_INVALID_ARGUMENT);
  CHECK(strstr(cbx_last_error(), "first_tokens") != NULL);
  sp.stream_first_tokens = 10;
  cbx_audio_free(a);
  cbx_audio_free(b);
  cbx_audio_free(c);
  cbx_model_free(m);
  m = NULL;
  CHECK(cbx_model_load(mtl_gguf, &mp, &m) == CBX_OK);
  if (!m) return;
  sp = cbx_synth_default_params();
  sp.language = "de";
  sp.seed = 5;
  a = b = c = NULL;
  CHECK(cbx_synthesize(m, "Guten Tag.", &sp, &a, &na, NULL) == CBX_OK && na > 0);
  sp.stream = 1;
  sp.stream_first_tokens = 10;
  sp.stream_chunk_tokens = 12;
  memset(&st, 0, sizeof st);
  st.abort_after = -1;
  cb.user_data = &st;
  cb.should_abort = should_abort;
  CHECK(cbx_synthesize(m, "Guten Tag.", &sp, &b, &nb, &cb) == CBX_OK);
  CHECK(nb == na && st.n_samples == nb && st.calls >= 2);
  CHECK(cbx_synthesize(m, "Guten Tag.", &sp, &c, &nc, NULL) == CBX_OK);
  CHECK(nc == nb && b && c && memcmp(b, c, nb * sizeof(float)) == 0);
  /* should_abort is polled once a decode step: stopped after a few steps, before the first piece */
  memset(&st, 0, sizeof st);
  st.abort_after = 3;
  CHECK(cbx_synthesize(m, "Guten Tag.", &sp, NULL, NULL, &cb) == CBX_ERR_ABORTED && st.calls == 0);
  sp.stream_prompt_tokens = -1;
  CHECK(cbx_synthesize(m, "Guten Tag.", &sp, NULL, NULL, &cb) == CBX_ERR_INVALID_ARGUMENT);
  CHECK(strstr(cbx_last_error(), "prompt_tokens") != NULL);
  cbx_audio_free(a);
  cbx_audio_free(b);
  cbx_audio_free(c);
  cbx_model_free(m);
}

/* One entry point for every variant (pipeline/pipeline.h): the same bad parameter gets the same
 * status and the same message from a Turbo model (gguf) and a Multilingual one (mtl_gguf), the
 * fields a variant ignores (top_k on Multilingual; min_p, cfg_weight, exaggeration on Turbo) and
 * the streaming schedule included. language "en" is valid on both, so the parameter is what fails. */
static void test_same_errors(const char* gguf, const char* mtl_gguf) {
  cbx_model_params mp = cbx_model_default_params();
  mp.n_threads = 1;
  mp.max_new_tokens = 8;
  cbx_model *t = NULL, *u = NULL;
  CHECK(cbx_model_load(gguf, &mp, &t) == CBX_OK);
  CHECK(cbx_model_load(mtl_gguf, &mp, &u) == CBX_OK);
  if (!t || !u) {
    cbx_model_free(t);
    cbx_model_free(u);
    return;
  }
  CHECK(strcmp(cbx_model_variant(t), "turbo") == 0 && strcmp(cbx_model_variant(u), "mtl") == 0);
  enum { N = 22 };
  cbx_synth_params bad[N];
  for (int i = 0; i < N; ++i) {
    bad[i] = cbx_synth_default_params();
    bad[i].language = "en";
  }
  int n = 0;
  bad[n++].temperature = -1;
  bad[n++].temperature = NAN;
  bad[n++].temperature = 11;
  bad[n++].top_p = 0;
  bad[n++].top_p = INFINITY;
  bad[n++].top_k = -1;
  bad[n++].top_k = 100001;
  bad[n++].repetition_penalty = 0;
  bad[n++].min_p = -0.25f;
  bad[n++].min_p = 2;
  bad[n++].cfg_weight = -1;
  bad[n++].cfg_weight = 101;
  bad[n++].exaggeration = NAN;
  bad[n++].exaggeration = -2;
  bad[n++].max_chunk_tokens = 0;
  bad[n++].max_chunk_tokens = -7;
  bad[n].stream = 1, bad[n++].stream_first_tokens = 0;
  bad[n].stream = 1, bad[n++].stream_chunk_tokens = -3;
  bad[n].stream = 1, bad[n++].stream_context_tokens = 10001;
  bad[n].stream = 1, bad[n++].stream_prompt_tokens = -2;
  bad[n++].language = "xx";
  bad[n].language = NULL, bad[n++].temperature = -1; /* a Multilingual model needs a language: differs */
  CHECK(n == N);
  char first[1024];
  for (int i = 0; i < N; ++i) {
    const cbx_status st = synth_once(t, &bad[i]);
    snprintf(first, sizeof first, "%s", cbx_last_error());
    const cbx_status sm = synth_once(u, &bad[i]);
    printf("both: %d %s\n", (int)st, first);
    if (st != CBX_ERR_INVALID_ARGUMENT || sm != CBX_ERR_INVALID_ARGUMENT) {
      fprintf(stderr, "%s:%d: case %d: want CBX_ERR_INVALID_ARGUMENT from both, got %d (turbo) and %d (mtl)\n",
              __FILE__, __LINE__, i, (int)st, (int)sm);
      ++g_failures;
    }
    /* the last two name the language, which the variants speak differently */
    const int same = strcmp(first, cbx_last_error()) == 0;
    if (same != (i < N - 2) || first[0] == 0) {
      fprintf(stderr, "%s:%d: case %d: messages\n  turbo: %s\n  mtl:   %s\n", __FILE__, __LINE__, i, first,
              cbx_last_error());
      ++g_failures;
    }
  }
  /* a valid call still works on both after all the refusals */
  cbx_synth_params ok = cbx_synth_default_params();
  ok.language = "en";
  CHECK(synth_once(t, &ok) == CBX_OK);
  CHECK(synth_once(u, &ok) == CBX_OK);
  cbx_model_free(t);
  cbx_model_free(u);
}

/* gguf: a tiny Turbo or Nano model (variant: "turbo" / "nano"); mtl_gguf: a Multilingual one. */
static void test_voices(const char* dir, const char* gguf, const char* variant, const char* mtl_gguf) {
  char ref[1024], shortref[1024], vpath[1024];
  snprintf(ref, sizeof ref, "%s/ref.wav", dir);
  snprintf(shortref, sizeof shortref, "%s/short.wav", dir);
  snprintf(vpath, sizeof vpath, "%s/a.voice", dir);
  CHECK(write_test_wav(ref, 7.0) == 0 && write_test_wav(shortref, 2.5) == 0);

  cbx_model_params mp = cbx_model_default_params();
  mp.n_threads = 2;
  mp.max_new_tokens = 24;
  cbx_model* m = NULL;
  CHECK(cbx_model_load(gguf, &mp, &m) == CBX_OK);
  if (!m) return;
  cbx_voice_free(NULL);
  CHECK(cbx_voice_variant(NULL) == NULL && cbx_voice_warning_count(NULL) == 0);

  /* argument errors */
  cbx_voice* v = (cbx_voice*)1;
  CHECK(cbx_voice_create(NULL, ref, NULL, &v) == CBX_ERR_INVALID_ARGUMENT && v == NULL);
  CHECK(cbx_voice_create(m, NULL, NULL, &v) == CBX_ERR_INVALID_ARGUMENT);
  CHECK(cbx_voice_create(m, ref, NULL, NULL) == CBX_ERR_INVALID_ARGUMENT);
  cbx_voice_params vp = cbx_voice_default_params();
  vp.struct_size = 1;
  CHECK(cbx_voice_create(m, ref, &vp, &v) == CBX_ERR_INVALID_ARGUMENT);
  CHECK(cbx_voice_load(NULL, &v) == CBX_ERR_INVALID_ARGUMENT);
  CHECK(cbx_voice_save(NULL, vpath) == CBX_ERR_INVALID_ARGUMENT);

  /* bad references */
  CHECK(cbx_voice_create(m, shortref, NULL, &v) == CBX_ERR_AUDIO && v == NULL);
  CHECK(strstr(cbx_last_error(), "short.wav") && strstr(cbx_last_error(), "2.50 s long") &&
        strstr(cbx_last_error(), "more than 5.0 s"));
  CHECK(cbx_voice_create(m, "/nonexistent/ref.wav", NULL, &v) == CBX_ERR_AUDIO);
  CHECK(strstr(cbx_last_error(), "/nonexistent/ref.wav") != NULL);
  CHECK(cbx_voice_load(gguf, &v) == CBX_ERR_VOICE && v == NULL);
  CHECK(strstr(cbx_last_error(), "not a voice file") != NULL);

  /* create, synthesize */
  cbx_voice* a = NULL;
  CHECK(cbx_voice_create(m, ref, NULL, &a) == CBX_OK && a != NULL);
  if (!a) {
    cbx_model_free(m);
    return;
  }
  CHECK(strcmp(cbx_voice_variant(a), variant) == 0);
  CHECK(cbx_voice_warning(a, -1) == NULL && cbx_voice_warning(a, cbx_voice_warning_count(a)) == NULL);
  cbx_synth_params sp = cbx_synth_default_params();
  sp.seed = 9;
  float *x1 = NULL, *x2 = NULL, *xb = NULL, *x3 = NULL, *x4 = NULL, *x5 = NULL;
  size_t n1 = 0, n2 = 0, nb = 0, n3 = 0, n4 = 0, n5 = 0;
  CHECK(cbx_synthesize_voice(m, a, "Hello world.", &sp, &x1, &n1, NULL) == CBX_OK && x1 && n1 > 0);
  CHECK(cbx_synthesize_voice(m, a, "Hello world.", &sp, &x2, &n2, NULL) == CBX_OK);
  CHECK(n2 == n1 && x1 && x2 && memcmp(x1, x2, n1 * sizeof(float)) == 0);
  /* the second call with voice a found its T3 prefix kept */
  cbx_timings tm;
  memset(&tm, 0, sizeof tm);
  tm.struct_size = sizeof tm;
  CHECK(cbx_model_last_timings(m, &tm) == CBX_OK && tm.n_chunks == 1 && tm.chunks_prefix_reused == 1);
  /* a plain call afterwards speaks with the built-in voice again (its prefix computed anew) */
  CHECK(cbx_synthesize(m, "Hello world.", &sp, &xb, &nb, NULL) == CBX_OK);
  CHECK(xb && (nb != n1 || memcmp(x1, xb, n1 * sizeof(float)) != 0));
  CHECK(cbx_model_last_timings(m, &tm) == CBX_OK && tm.chunks_prefix_reused == 0);
  /* prepared ahead: voice a, then the built-in one; the next call reuses it, same audio */
  CHECK(cbx_model_prepare_voice(NULL, NULL) == CBX_ERR_INVALID_ARGUMENT);
  CHECK(cbx_model_prepare_voice(m, a) == CBX_OK);
  CHECK(cbx_model_prepare_voice(m, NULL) == CBX_OK);
  CHECK(cbx_synthesize_voice(m, NULL, "Hello world.", &sp, &x3, &n3, NULL) == CBX_OK);
  CHECK(n3 == nb && x3 && xb && memcmp(x3, xb, nb * sizeof(float)) == 0);
  CHECK(cbx_model_last_timings(m, &tm) == CBX_OK && tm.chunks_prefix_reused == 1);
  /* an older caller's smaller struct gets the fields it knows */
  cbx_timings old;
  memset(&old, 0x5a, sizeof old);
  old.struct_size = offsetof(cbx_timings, chunks_prefix_reused);
  CHECK(cbx_model_last_timings(m, &old) == CBX_OK && old.n_chunks == 1);
  {
    int64_t untouched;
    memset(&untouched, 0x5a, sizeof untouched);
    CHECK(memcmp(&old.chunks_prefix_reused, &untouched, sizeof untouched) == 0);
  }

  /* the voice prefix on disk: a second model instance loads it and speaks the same audio */
  {
    char pfx[600], bad[600];
    snprintf(pfx, sizeof pfx, "%s/builtin.prefix", dir);
    snprintf(bad, sizeof bad, "%s/a.voice.notacache", dir);
    int32_t loaded = 7;
    CHECK(cbx_model_load_voice_prefix(m, NULL, pfx, &loaded) == CBX_OK && loaded == 0); /* absent */
    CHECK(cbx_model_save_voice_prefix(NULL, NULL, pfx) == CBX_ERR_INVALID_ARGUMENT);
    CHECK(cbx_model_load_voice_prefix(m, NULL, pfx, NULL) == CBX_ERR_INVALID_ARGUMENT);
    CHECK(cbx_model_save_voice_prefix(m, NULL, pfx) == CBX_OK);
    cbx_model* m2 = NULL;
    CHECK(cbx_model_load(gguf, &mp, &m2) == CBX_OK);
    if (m2) {
      CHECK(cbx_model_load_voice_prefix(m2, a, pfx, &loaded) == CBX_OK && loaded == 0); /* another voice */
      CHECK(cbx_model_load_voice_prefix(m2, NULL, pfx, &loaded) == CBX_OK && loaded == 1);
      float* y = NULL;
      size_t ny = 0;
      CHECK(cbx_synthesize(m2, "Hello world.", &sp, &y, &ny, NULL) == CBX_OK);
      CHECK(y && ny == nb && memcmp(y, xb, nb * sizeof(float)) == 0);
      CHECK(cbx_model_last_timings(m2, &tm) == CBX_OK && tm.chunks_prefix_reused == 1);
      cbx_audio_free(y);
      /* a file that is not a cache: refused, left as it was */
      FILE* nf = fopen(bad, "wb");
      CHECK(nf && fputs("not a cache", nf) >= 0 && fclose(nf) == 0);
      CHECK(cbx_model_load_voice_prefix(m2, NULL, bad, &loaded) == CBX_ERR_FILE && loaded == 0);
      CHECK(strstr(cbx_last_error(), "not a chatterbox prompt cache") != NULL);
      CHECK(cbx_model_save_voice_prefix(m2, NULL, "/nonexistent-dir/x.prefix") == CBX_ERR_FILE);
      CHECK(strstr(cbx_last_error(), "/nonexistent-dir/x.prefix") != NULL);
      /* the model file itself as the cache: refused before anything is written (any path to it) */
      {
        struct stat before, after;
        CHECK(stat(gguf, &before) == 0);
        CHECK(cbx_model_save_voice_prefix(m2, NULL, gguf) == CBX_ERR_FILE);
        CHECK(strstr(cbx_last_error(), "is the model") != NULL);
        CHECK(stat(gguf, &after) == 0 && after.st_ino == before.st_ino && after.st_size == before.st_size &&
              after.st_mtime == before.st_mtime);
      }
      cbx_model_free(m2);
    }
    unlink(pfx);
    unlink(bad);
  }

  /* save -> load: the same audio */
  cbx_voice* b = NULL;
  CHECK(cbx_voice_save(a, vpath) == CBX_OK);
  CHECK(cbx_voice_load(vpath, &b) == CBX_OK && b != NULL);
  CHECK(cbx_synthesize_voice(m, b, "Hello world.", &sp, &x4, &n4, NULL) == CBX_OK);
  CHECK(n4 == n1 && x4 && memcmp(x1, x4, n1 * sizeof(float)) == 0);

  /* from memory: the same voice */
  FILE* f = fopen(ref, "rb");
  CHECK(f != NULL);
  if (f) {
    fseek(f, 0, SEEK_END);
    const long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    char* buf = (char*)malloc((size_t)size);
    CHECK(buf && fread(buf, 1, (size_t)size, f) == (size_t)size);
    fclose(f);
    cbx_voice* c = NULL;
    CHECK(cbx_voice_create_from_memory(m, buf, (size_t)size, "upload.wav", NULL, &c) == CBX_OK && c);
    CHECK(cbx_synthesize_voice(m, c, "Hello world.", &sp, &x5, &n5, NULL) == CBX_OK);
    CHECK(n5 == n1 && x5 && memcmp(x1, x5, n1 * sizeof(float)) == 0);
    cbx_voice* d = NULL;
    CHECK(cbx_voice_create_from_memory(m, buf, 100, "cut.wav", NULL, &d) == CBX_ERR_AUDIO && d == NULL);
    CHECK(strstr(cbx_last_error(), "cut.wav") != NULL);
    cbx_voice_free(c);
    free(buf);
  }

  /* a Multilingual voice on a Turbo model is refused */
  cbx_model* mm = NULL;
  cbx_voice* mv = NULL;
  CHECK(cbx_model_load(mtl_gguf, &mp, &mm) == CBX_OK);
  if (mm) {
    CHECK(cbx_voice_create(mm, ref, NULL, &mv) == CBX_OK && mv);
    CHECK(mv && strcmp(cbx_voice_variant(mv), "mtl") == 0);
    float* e = NULL;
    size_t ne = 0;
    CHECK(cbx_synthesize_voice(m, mv, "Hello.", &sp, &e, &ne, NULL) == CBX_ERR_VOICE && e == NULL);
    CHECK(strstr(cbx_last_error(), "built for a mtl model") != NULL);
    CHECK(cbx_model_prepare_voice(m, mv) == CBX_ERR_VOICE);
    CHECK(strstr(cbx_last_error(), "cbx_model_prepare_voice") != NULL);
    CHECK(cbx_model_prepare_voice(mm, NULL) == CBX_OK && cbx_model_prepare_voice(mm, mv) == CBX_OK);
    CHECK(cbx_model_save_voice_prefix(mm, NULL, "x.prefix") == CBX_ERR_UNSUPPORTED_MODEL);
    cbx_voice_free(mv);
    cbx_model_free(mm);
  }

  cbx_audio_free(x1);
  cbx_audio_free(x2);
  cbx_audio_free(xb);
  cbx_audio_free(x3);
  cbx_audio_free(x4);
  cbx_audio_free(x5);
  cbx_voice_free(a);
  cbx_voice_free(b);
  cbx_model_free(m);
}

/* Load progress (cbx_model_params.progress_callback) on a tiny model: several calls, fractions in
 * [0, 1] that never decrease, only the last exactly 1; returning 0 at the first, a later or the
 * last call cancels the load (CBX_ERR_ABORTED, no model, the message; ASan checks nothing leaks);
 * no call after cbx_model_load returns; a NULL callback and a pre-7 struct load as before. */
typedef struct {
  int calls;
  int stop_at; /* return 0 at this call (1-based); 0 = never */
  float values[64];
  int bad; /* a value outside [0, 1] or below the one before */
} progress_state;

static int on_load_progress(float p, void* user) {
  progress_state* s = (progress_state*)user;
  if (!(p >= 0.f && p <= 1.f) || (s->calls > 0 && s->calls <= 64 && p < s->values[s->calls - 1])) s->bad = 1;
  if (s->calls < 64) s->values[s->calls] = p;
  ++s->calls;
  return s->calls != s->stop_at;
}

/* Load parameters that report into a cleared *st. */
static cbx_model_params progress_params(progress_state* st) {
  cbx_model_params mp = cbx_model_default_params();
  CHECK(mp.progress_callback == NULL && mp.progress_callback_user_data == NULL);
  mp.n_threads = 2;
  mp.max_new_tokens = 24;
  mp.progress_callback = on_load_progress;
  memset(st, 0, sizeof *st);
  mp.progress_callback_user_data = st;
  return mp;
}

static void test_load_progress(const char* gguf) {
  progress_state st;
  cbx_model_params mp = progress_params(&st);
  cbx_model* m = (cbx_model*)1;
  CHECK(cbx_model_load(gguf, &mp, &m) == CBX_OK && m != NULL);
  const int n = st.calls;
  CHECK(n == 5 && !st.bad); /* an f32 T3 packs nothing: one report per stage */
  CHECK(n >= 1 && n <= 64 && st.values[n - 1] == 1.0f);
  for (int i = 0; i + 1 < n && i < 64; ++i) CHECK(st.values[i] < 1.0f); /* real steps, not 1 repeated */
  CHECK(n >= 2 && st.values[0] < st.values[n - 2]);                     /* and rising */
  float* x = NULL;
  size_t nx = 0;
  cbx_synth_params sp = cbx_synth_default_params();
  sp.language = "en"; /* every model speaks English */
  CHECK(m && cbx_synthesize(m, "Hi.", &sp, &x, &nx, NULL) == CBX_OK && nx > 0);
  cbx_audio_free(x);
  cbx_model_free(m);
  CHECK(st.calls == n); /* never called after the load returned */

  /* cancelled at the first call, a later one and the last (the 1.0 call) */
  const int stops[3] = {1, 2, n};
  for (int i = 0; i < 3; ++i) {
    memset(&st, 0, sizeof st);
    st.stop_at = stops[i];
    m = (cbx_model*)1;
    CHECK(cbx_model_load(gguf, &mp, &m) == CBX_ERR_ABORTED && m == NULL);
    CHECK(st.calls == stops[i]);
    CHECK(strstr(cbx_last_error(), "model load cancelled by the progress callback") != NULL);
    CHECK(strstr(cbx_last_error(), gguf) != NULL);
  }
  /* the model loads again afterwards */
  memset(&st, 0, sizeof st);
  CHECK(cbx_model_load(gguf, &mp, &m) == CBX_OK && m != NULL && st.calls == n);
  cbx_model_free(m);

  /* a NULL callback (user data ignored), and a pre-7 caller whose struct ends before the fields */
  mp.progress_callback = NULL;
  memset(&st, 0, sizeof st);
  CHECK(cbx_model_load(gguf, &mp, &m) == CBX_OK && m != NULL && st.calls == 0);
  cbx_model_free(m);
  mp.progress_callback = on_load_progress;
  mp.struct_size = offsetof(cbx_model_params, progress_callback);
  st.stop_at = 1; /* would cancel if it were read */
  CHECK(cbx_model_load(gguf, &mp, &m) == CBX_OK && m != NULL && st.calls == 0);
  cbx_model_free(m);
}

/* A q8_0 model's T3 writes planar copies of its matrices (where their SIMD kernels exist: x86-64)
 * and reports each one: more calls than the five stage reports, more than min_packs of them
 * between the first (Open) and the last three (Flow, Cfm, Hift), fractions rising, only the last
 * exactly 1; returning 0 at the second of those packing calls cancels the load there
 * (CBX_ERR_ABORTED, no model, nothing leaked under ASan); without the copies (no_repack) only the
 * five stages report. */
/* Whether T3's quantized rows get planar copies here: the AVX2 and AVX-512 row kernels have
 * them, the generic ones (another architecture, an x86 CPU without AVX2 / FMA, or
 * CBX_DEBUG_FORCE_ISA=generic) do not. */
static int planar_copies(void) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  const char* forced = getenv("CBX_DEBUG_FORCE_ISA");
  if (forced && strcmp(forced, "generic") == 0) return 0;
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
  return 0;
#endif
}

static void test_load_progress_t3(const char* gguf, int min_packs) {
  progress_state st;
  cbx_model_params mp = progress_params(&st);
  cbx_model* m = NULL;
  CHECK(cbx_model_load(gguf, &mp, &m) == CBX_OK && m != NULL);
  cbx_model_free(m);
  const int n = st.calls;
  if (planar_copies()) {
    CHECK(n > 5 + min_packs && n <= 64 && !st.bad);
    CHECK(n <= 64 && st.values[n - 1] == 1.0f);
    for (int i = 0; i + 1 < n && i < 64; ++i) CHECK(st.values[i] < 1.0f);
    CHECK(n > 5 && st.values[0] < st.values[1] && st.values[1] < st.values[n - 4]); /* T3 moves */
    memset(&st, 0, sizeof st);
    st.stop_at = 3;
    m = (cbx_model*)1;
    CHECK(cbx_model_load(gguf, &mp, &m) == CBX_ERR_ABORTED && m == NULL && st.calls == 3);
    CHECK(strstr(cbx_last_error(), "model load cancelled by the progress callback") != NULL);
  } else {
    CHECK(n == 5 && !st.bad); /* no planar copies here */
  }
  mp.no_repack = 1;
  memset(&st, 0, sizeof st);
  m = NULL;
  CHECK(cbx_model_load(gguf, &mp, &m) == CBX_OK && m != NULL && st.calls == 5 && !st.bad);
  cbx_model_free(m);
}

int main(int argc, char** argv) {
  char cmd[4096], dir[] = "/tmp/cbx-test-c-api-XXXXXX", gguf[1024], bin[1024];
  if (argc < 2) {
    fprintf(stderr, "usage: test_c_api BUILD_DIR\n");
    return 2;
  }
  if (argc == 3 && strcmp(argv[1], "--bad-debug-env") == 0) { /* the child of the CBX_DEBUG_* check */
    cbx_model* bad = (cbx_model*)1;
    CHECK(cbx_model_load(argv[2], NULL, &bad) == CBX_ERR_INVALID_ARGUMENT && bad == NULL);
    CHECK(strcmp(cbx_last_error(),
                 "environment variable CBX_DEBUG_NO_AMX=yes is not one of 0, 1 (a debugging "
                 "switch; unset it for the default)") == 0);
    /* the same error on every load, never a half-loaded model */
    CHECK(cbx_model_load(argv[2], NULL, &bad) == CBX_ERR_INVALID_ARGUMENT && bad == NULL);
    return g_failures == 0 ? 0 : 1;
  }
  /* The version line: "X.Y.Z (git HASH) COMPILER BUILD_TYPE". */
  CHECK(cbx_version() != NULL && cbx_version()[0] >= '0' && cbx_version()[0] <= '9' &&
        strstr(cbx_version(), " (git ") != NULL);
  snprintf(bin, sizeof bin, "%s/bin/chatterbox-mkckpt", argv[1]);
  if (access(bin, X_OK) != 0) {
    printf("skip: %s not built\n", bin);
    return 77;
  }
  if (!mkdtemp(dir)) return 2;
  snprintf(gguf, sizeof gguf, "%s/m.gguf", dir);
  snprintf(cmd, sizeof cmd,
           "'%s/bin/chatterbox-mkckpt' --variant turbo --size tiny --seed 1 '%s/ckpt' > /dev/null 2>&1 && "
           "'%s/bin/chatterbox' convert '%s/ckpt' -o '%s' --type f32 --quiet > /dev/null 2>&1",
           argv[1], dir, argv[1], dir, gguf);
  if (system(cmd) != 0) {
    fprintf(stderr, "FAIL: could not build the tiny model: %s\n", cmd);
    return 1;
  }

  CHECK(cbx_api_version() == CBX_API_VERSION);
  CHECK(strcmp(cbx_status_string(CBX_OK), "ok") == 0);
  cbx_model_free(NULL);
  cbx_audio_free(NULL);
  CHECK(cbx_model_sample_rate(NULL) == 0);

  /* argument and load errors */
  cbx_model* m = (cbx_model*)1;
  CHECK(cbx_model_load(NULL, NULL, &m) == CBX_ERR_INVALID_ARGUMENT && m == NULL);
  CHECK(strstr(cbx_last_error(), "path") != NULL);
  CHECK(cbx_model_load(gguf, NULL, NULL) == CBX_ERR_INVALID_ARGUMENT);
  CHECK(cbx_model_load("/nonexistent/x.gguf", NULL, &m) == CBX_ERR_MODEL_LOAD && m == NULL);
  CHECK(strstr(cbx_last_error(), "/nonexistent/x.gguf") != NULL);
  cbx_model_params mp = cbx_model_default_params();
  mp.struct_size = 3;
  CHECK(cbx_model_load(gguf, &mp, &m) == CBX_ERR_INVALID_ARGUMENT);
  CHECK(strstr(cbx_last_error(), "struct_size") != NULL);
  mp = cbx_model_default_params();
  mp.kv_type = 7;
  CHECK(cbx_model_load(gguf, &mp, &m) == CBX_ERR_INVALID_ARGUMENT);

  mp = cbx_model_default_params();
  mp.n_threads = 2;
  mp.max_new_tokens = 40; /* random weights rarely stop: keep the test short */
  CHECK(cbx_model_load(gguf, &mp, &m) == CBX_OK);
  if (!m) {
    fprintf(stderr, "FAIL: model did not load: %s\n", cbx_last_error());
    return 1;
  }
  CHECK(cbx_model_sample_rate(m) == 24000);

  /* synthesis: determinism per seed */
  cbx_synth_params sp = cbx_synth_default_params();
  sp.seed = 1;
  float *a = NULL, *b = NULL, *c = NULL;
  size_t na = 0, nb = 0, nc = 0;
  CHECK(cbx_synthesize(m, "Hello world.", &sp, &a, &na, NULL) == CBX_OK);
  CHECK(a != NULL && na > 0 && na % 960 == 0);
  for (size_t i = 0; a && i < na; ++i)
    if (!isfinite(a[i]) || fabsf(a[i]) > 1.0f) {
      CHECK(!"sample finite and within [-1, 1]");
      break;
    }
  for (size_t i = 0; a && i < 480 && i < na; ++i) CHECK(a[i] == 0.0f); /* start trim */
  CHECK(cbx_synthesize(m, "Hello world.", &sp, &b, &nb, NULL) == CBX_OK);
  CHECK(na == nb && a && b && memcmp(a, b, na * sizeof(float)) == 0);
  sp.seed = 2;
  CHECK(cbx_synthesize(m, "Hello world.", &sp, &c, &nc, NULL) == CBX_OK);
  CHECK(c != NULL && (nc != na || memcmp(a, c, na * sizeof(float)) != 0));

  cbx_timings tm;
  memset(&tm, 0, sizeof tm);
  tm.struct_size = sizeof tm;
  CHECK(cbx_model_last_timings(m, &tm) == CBX_OK);
  CHECK(tm.n_samples == (int64_t)nc && tm.n_chunks == 1 && tm.n_speech_tokens > 0 && tm.total_ms > 0);

  /* an older caller's smaller struct: fields it lacks keep their defaults */
  cbx_synth_params old = cbx_synth_default_params();
  old.seed = 1;
  old.struct_size = offsetof(cbx_synth_params, temperature);
  float* d = NULL;
  size_t nd = 0;
  CHECK(cbx_synthesize(m, "Hello world.", &old, &d, &nd, NULL) == CBX_OK);
  CHECK(nd == na && d && a && memcmp(a, d, na * sizeof(float)) == 0);
  cbx_audio_free(d);

  /* gemm_precision: an f32 GGUF's default is exact F32 (the same samples); BF16 loads and
   * speaks (its samples differ only where a bf16 GEMM exists); a pre-6 caller's struct (no
   * gemm_precision) keeps the default */
  {
    const int32_t precs[3] = {CBX_GEMM_F32, CBX_GEMM_BF16, -2 /* = old struct */};
    for (int i = 0; i < 3; ++i) {
      cbx_model_params gp = cbx_model_default_params();
      gp.n_threads = 2;
      gp.max_new_tokens = 40;
      if (precs[i] == -2)
        gp.struct_size = offsetof(cbx_model_params, gemm_precision);
      else
        gp.gemm_precision = precs[i];
      cbx_model* g = NULL;
      CHECK(cbx_model_load(gguf, &gp, &g) == CBX_OK);
      float* e = NULL;
      size_t ne = 0;
      sp.seed = 1;
      CHECK(g && cbx_synthesize(g, "Hello world.", &sp, &e, &ne, NULL) == CBX_OK);
      CHECK(e != NULL && ne > 0);
      if (precs[i] != CBX_GEMM_BF16) CHECK(ne == na && e && a && memcmp(a, e, na * sizeof(float)) == 0);
      cbx_audio_free(e);
      cbx_model_free(g);
    }
    /* cfm_precision INT8 on this f32 GGUF: the estimator's linears in int8 (the default keeps
     * f32 weights exact): the same tokens, so the same length, other samples */
    cbx_model_params ip = cbx_model_default_params();
    ip.n_threads = 2;
    ip.max_new_tokens = 40;
    ip.cfm_precision = CBX_GEMM_INT8;
    cbx_model* g = NULL;
    CHECK(cbx_model_load(gguf, &ip, &g) == CBX_OK);
    float* e = NULL;
    size_t ne = 0;
    sp.seed = 1;
    CHECK(g && cbx_synthesize(g, "Hello world.", &sp, &e, &ne, NULL) == CBX_OK);
    CHECK(ne == na && e && a && memcmp(a, e, na * sizeof(float)) != 0);
    cbx_audio_free(e);
    cbx_model_free(g);
  }
  sp.seed = 2;

  /* A bad CBX_DEBUG_* value: cbx_model_load fails with one message naming the variable (run in a
   * child process: the library reads the variables once per process) */
  snprintf(cmd, sizeof cmd, "CBX_DEBUG_NO_AMX=yes '%s' --bad-debug-env '%s'", argv[0], gguf);
  CHECK(system(cmd) == 0);

  /* text errors */
  float* e = (float*)1;
  size_t ne = 5;
  CHECK(cbx_synthesize(m, "", &sp, &e, &ne, NULL) == CBX_ERR_TEXT && e == NULL && ne == 0);
  CHECK(strstr(cbx_last_error(), "empty") != NULL);
  CHECK(cbx_synthesize(m, "  \n\t ", &sp, &e, &ne, NULL) == CBX_ERR_TEXT);
  CHECK(cbx_synthesize(m,
                       "ab\xff"
                       "cd",
                       &sp, &e, &ne, NULL) == CBX_ERR_TEXT);
  CHECK(strstr(cbx_last_error(), "UTF-8") != NULL);
  CHECK(cbx_synthesize(m, NULL, &sp, &e, &ne, NULL) == CBX_ERR_INVALID_ARGUMENT);
  CHECK(cbx_synthesize(NULL, "x", &sp, &e, &ne, NULL) == CBX_ERR_INVALID_ARGUMENT);
  CHECK(cbx_synthesize(m, "x", &sp, NULL, NULL, NULL) == CBX_ERR_INVALID_ARGUMENT);
  sp.top_p = 1.5f;
  CHECK(cbx_synthesize(m, "x", &sp, &e, &ne, NULL) == CBX_ERR_INVALID_ARGUMENT);
  sp.top_p = CBX_DEFAULT_FLOAT;
  test_invalid_params(m, gguf);

  /* callbacks: streamed audio adds up; abort stops */
  cb_state st = {0, 0, -1, 0};
  cbx_callbacks cb;
  memset(&cb, 0, sizeof cb);
  cb.struct_size = sizeof cb;
  cb.on_audio = on_audio;
  cb.should_abort = should_abort;
  cb.user_data = &st;
  sp.seed = 1;
  sp.max_chunk_tokens = 4; /* several chunks */
  CHECK(cbx_synthesize(m, "One two three four five. Six seven eight nine ten. Eleven.", &sp, NULL, NULL, &cb) ==
        CBX_OK);
  CHECK(st.calls >= 2 && st.n_samples > 0 && st.polls > 0);
  CHECK(cbx_model_last_timings(m, &tm) == CBX_OK && tm.n_chunks == st.calls && tm.n_samples == (int64_t)st.n_samples);
  st.abort_after = 3;
  st.polls = 0;
  st.calls = 0;
  float* f = NULL;
  size_t nf = 0;
  CHECK(cbx_synthesize(m, "Hello world.", &sp, &f, &nf, &cb) == CBX_ERR_ABORTED && f == NULL && nf == 0);
  CHECK(strstr(cbx_last_error(), "abort") != NULL);
  CHECK(st.calls == 0);
  /* the model is usable after an abort, and gives the same audio as before */
  sp.max_chunk_tokens = CBX_DEFAULT_INT;
  CHECK(cbx_synthesize(m, "Hello world.", &sp, &f, &nf, NULL) == CBX_OK);
  CHECK(nf == na && f && a && memcmp(a, f, na * sizeof(float)) == 0);
  cbx_audio_free(f);

  /* languages of a Turbo model: English only */
  CHECK(strcmp(cbx_model_variant(m), "turbo") == 0);
  CHECK(cbx_model_language_count(m) == 1 && strcmp(cbx_model_language(m, 0), "en") == 0);
  CHECK(cbx_model_language(m, 1) == NULL && cbx_model_language(m, -1) == NULL);
  sp = cbx_synth_default_params();
  sp.language = "fr";
  CHECK(cbx_synthesize(m, "Bonjour.", &sp, &e, &ne, NULL) == CBX_ERR_INVALID_ARGUMENT);
  CHECK(strstr(cbx_last_error(), "English only") != NULL);
  sp.seed = 1;
  {
    /* "en" in any case: the same audio as no language */
    const char* english[] = {"en", "En", "EN", "eN", ""};
    for (size_t i = 0; i < sizeof english / sizeof english[0]; ++i) {
      sp.language = english[i];
      float* g = NULL;
      size_t ng = 0;
      CHECK(cbx_synthesize(m, "Hello world.", &sp, &g, &ng, NULL) == CBX_OK);
      CHECK(ng == na && g && a && memcmp(a, g, na * sizeof(float)) == 0);
      cbx_audio_free(g);
    }
  }

  cbx_audio_free(a);
  cbx_audio_free(b);
  cbx_audio_free(c);
  cbx_model_free(m);

  /* Multilingual */
  CHECK(cbx_model_variant(NULL) == NULL && cbx_model_language_count(NULL) == 0);
  CHECK(cbx_language_name("fr") && strcmp(cbx_language_name("fr"), "French") == 0);
  CHECK(cbx_language_name("xx") == NULL && cbx_language_name(NULL) == NULL);
  snprintf(gguf, sizeof gguf, "%s/mtl.gguf", dir);
  snprintf(cmd, sizeof cmd,
           "'%s/bin/chatterbox-mkckpt' --variant mtl --size tiny --seed 1 '%s/mtl' > /dev/null 2>&1 && "
           "'%s/bin/chatterbox' convert '%s/mtl' -o '%s' --type f32 --quiet > /dev/null 2>&1",
           argv[1], dir, argv[1], dir, gguf);
  if (system(cmd) != 0) {
    fprintf(stderr, "FAIL: could not build the tiny Multilingual model: %s\n", cmd);
    return 1;
  }
  mp = cbx_model_default_params();
  mp.n_threads = 2;
  mp.max_new_tokens = 24;
  CHECK(cbx_model_load(gguf, &mp, &m) == CBX_OK);
  if (!m) {
    fprintf(stderr, "FAIL: Multilingual model did not load: %s\n", cbx_last_error());
    return 1;
  }
  CHECK(strcmp(cbx_model_variant(m), "mtl") == 0 && cbx_model_sample_rate(m) == 24000);
  CHECK(cbx_model_language_count(m) == 23);
  CHECK(strcmp(cbx_model_language(m, 0), "ar") == 0 && strcmp(cbx_model_language(m, 22), "zh") == 0);
  sp = cbx_synth_default_params();
  sp.seed = 3;
  CHECK(cbx_synthesize(m, "Bonjour.", &sp, &e, &ne, NULL) == CBX_ERR_INVALID_ARGUMENT && e == NULL);
  CHECK(strstr(cbx_last_error(), "needs a language") && strstr(cbx_last_error(), "fr  French"));
  sp.language = "xx";
  CHECK(cbx_synthesize(m, "Bonjour.", &sp, &e, &ne, NULL) == CBX_ERR_INVALID_ARGUMENT);
  CHECK(strstr(cbx_last_error(), "'xx'") && strstr(cbx_last_error(), "zh  Chinese"));
  sp.language = "fr";
  float *h = NULL, *k = NULL, *l = NULL;
  size_t nh = 0, nk = 0, nl = 0;
  CHECK(cbx_synthesize(m, "Bonjour tout le monde.", &sp, &h, &nh, NULL) == CBX_OK);
  CHECK(h != NULL && nh % 960 == 0);
  for (size_t i = 0; h && i < 480 && i < nh; ++i) CHECK(h[i] == 0.0f); /* start trim */
  sp.language = "FR";
  CHECK(cbx_synthesize(m, "Bonjour tout le monde.", &sp, &k, &nk, NULL) == CBX_OK);
  CHECK(nk == nh && h && k && memcmp(h, k, nh * sizeof(float)) == 0);
  memset(&tm, 0, sizeof tm);
  tm.struct_size = sizeof tm;
  CHECK(cbx_model_last_timings(m, &tm) == CBX_OK && tm.n_samples == (int64_t)nk && tm.n_chunks == 1);
  CHECK(nh == 0 || tm.n_samples == (tm.n_speech_tokens > 1 ? tm.n_speech_tokens - 1 : 1) * 960); /* tail trim */
  sp.cfg_weight = 0; /* the Multilingual parameters reach the model */
  CHECK(cbx_synthesize(m, "Bonjour tout le monde.", &sp, &l, &nl, NULL) == CBX_OK);
  CHECK(l != NULL && (nl != nh || memcmp(h, l, nh * sizeof(float)) != 0));
  sp.cfg_weight = CBX_DEFAULT_FLOAT;
  sp.min_p = 3;
  CHECK(cbx_synthesize(m, "Bonjour.", &sp, &e, &ne, NULL) == CBX_ERR_INVALID_ARGUMENT);
  CHECK(strcmp(cbx_last_error(), "min_p (--min-p) must be in [0, 1], got 3") == 0);
  sp.min_p = CBX_DEFAULT_FLOAT;
  sp.language = "zh";
  CHECK(cbx_synthesize(m, "", &sp, &e, &ne, NULL) == CBX_ERR_TEXT);
  /* an older caller's struct has no language field: refused with the list, never a crash */
  old = cbx_synth_default_params();
  old.struct_size = offsetof(cbx_synth_params, language);
  CHECK(cbx_synthesize(m, "Hallo.", &old, &e, &ne, NULL) == CBX_ERR_INVALID_ARGUMENT);
  /* abort inside a Multilingual synthesis */
  cb_state st2 = {0, 0, 2, 0};
  cb.user_data = &st2;
  sp.language = "de";
  CHECK(cbx_synthesize(m, "Guten Tag.", &sp, NULL, NULL, &cb) == CBX_ERR_ABORTED && st2.calls == 0);
  cbx_audio_free(h);
  cbx_audio_free(k);
  cbx_audio_free(l);
  cbx_model_free(m);

  /* voices (turbo model m.gguf, mtl model in gguf) */
  {
    char turbo[1024];
    snprintf(turbo, sizeof turbo, "%s/m.gguf", dir);
    test_voices(dir, turbo, "turbo", gguf);
    test_stream(turbo, gguf);
    test_same_errors(turbo, gguf);
    test_load_progress(turbo);
    test_load_progress(gguf);
  }

  /* Nano (Turbo's pipeline, GPT-2 small T3): loads, says Nano, synthesizes deterministically, and
     runs the voice, cloning and prompt-cache checks above */
  {
    char nano[1024];
    snprintf(nano, sizeof nano, "%s/nano.gguf", dir);
    snprintf(cmd, sizeof cmd,
             "'%s/bin/chatterbox-mkckpt' --variant nano --size tiny --seed 1 '%s/nano' > /dev/null 2>&1 && "
             "'%s/bin/chatterbox' convert '%s/nano' -o '%s' --type f32 --quiet > /dev/null 2>&1",
             argv[1], dir, argv[1], dir, nano);
    CHECK(system(cmd) == 0);
    cbx_model_params np = cbx_model_default_params();
    np.n_threads = 2;
    np.max_new_tokens = 24;
    cbx_model* nm = NULL;
    CHECK(cbx_model_load(nano, &np, &nm) == CBX_OK);
    if (nm) {
      CHECK(strcmp(cbx_model_variant(nm), "nano") == 0);
      CHECK(cbx_model_language_count(nm) == 1 && strcmp(cbx_model_language(nm, 0), "en") == 0);
      cbx_synth_params ns = cbx_synth_default_params();
      ns.seed = 3;
      float* x[2] = {NULL, NULL};
      size_t nx[2] = {0, 0};
      for (int i = 0; i < 2; ++i) CHECK(cbx_synthesize(nm, "Hello [laugh] world.", &ns, &x[i], &nx[i], NULL) == CBX_OK);
      CHECK(x[0] && x[1] && nx[0] > 0 && nx[0] == nx[1] && memcmp(x[0], x[1], nx[0] * sizeof(float)) == 0);
      cbx_audio_free(x[0]);
      cbx_audio_free(x[1]);
      cbx_model_free(nm);
    }
    char vdir[1024]; /* its own directory: test_voices expects no prompt cache file there yet */
    snprintf(vdir, sizeof vdir, "%s/nano-voices", dir);
    CHECK(mkdir(vdir, 0700) == 0);
    test_voices(vdir, nano, "nano", gguf);
  }

  /* no_repack: a q8_0 model without the planar decode copies gives the same samples */
  {
    char q8[1024];
    snprintf(q8, sizeof q8, "%s/q8.gguf", dir);
    snprintf(cmd, sizeof cmd, "'%s/bin/chatterbox' convert '%s/ckpt' -o '%s' --type q8_0 --quiet > /dev/null 2>&1",
             argv[1], dir, q8);
    CHECK(system(cmd) == 0);
    test_load_progress_t3(q8, 8); /* 2 layers x 4 matrices, then the speech head */
    char mq8[1024];
    snprintf(mq8, sizeof mq8, "%s/mtl-q8.gguf", dir);
    snprintf(cmd, sizeof cmd, "'%s/bin/chatterbox' convert '%s/mtl' -o '%s' --type q8_0 --quiet > /dev/null 2>&1",
             argv[1], dir, mq8);
    CHECK(system(cmd) == 0);
    test_load_progress_t3(mq8, 8);
    float* x[2] = {NULL, NULL};
    size_t nx[2] = {0, 0};
    for (int i = 0; i < 2; ++i) {
      cbx_model_params qp = cbx_model_default_params();
      CHECK(qp.no_repack == 0);
      qp.n_threads = 2;
      qp.max_new_tokens = 24;
      qp.no_repack = i;
      cbx_model* qm = NULL;
      CHECK(cbx_model_load(q8, &qp, &qm) == CBX_OK);
      if (!qm) continue;
      cbx_synth_params qs = cbx_synth_default_params();
      qs.seed = 4;
      CHECK(cbx_synthesize(qm, "Hello world.", &qs, &x[i], &nx[i], NULL) == CBX_OK);
      cbx_model_free(qm);
    }
    CHECK(x[0] && x[1] && nx[0] > 0 && nx[0] == nx[1] && memcmp(x[0], x[1], nx[0] * sizeof(float)) == 0);
    cbx_audio_free(x[0]);
    cbx_audio_free(x[1]);
  }

  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "warning: could not remove %s\n", dir);
  if (g_failures) {
    fprintf(stderr, "FAIL: %d checks failed\n", g_failures);
    return 1;
  }
  printf("test_c_api: all checks passed\n");
  return 0;
}
