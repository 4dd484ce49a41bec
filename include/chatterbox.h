/* chatterbox.cpp C API: Chatterbox Turbo and Multilingual text-to-speech from one GGUF file.
 *
 *   cbx_model_params mp = cbx_model_default_params();
 *   cbx_model* m = NULL;
 *   if (cbx_model_load("turbo.gguf", &mp, &m) != CBX_OK) fprintf(stderr, "%s\n", cbx_last_error());
 *   cbx_synth_params sp = cbx_synth_default_params();
 *   float* audio = NULL; size_t n = 0;
 *   if (cbx_synthesize(m, "Hello.", &sp, &audio, &n, NULL) == CBX_OK) { ... 24 kHz mono ... }
 *   cbx_audio_free(audio);
 *   cbx_voice* v = NULL;                                  (zero-shot voice cloning)
 *   if (cbx_voice_create(m, "ref.wav", NULL, &v) == CBX_OK) cbx_synthesize_voice(m, v, "Hi.", &sp, ...);
 *   cbx_voice_free(v);
 *   cbx_model_free(m);
 *
 * Rules:
 *  - No function throws or exits. Failures return a status; cbx_last_error() then gives a
 *    message (thread-local, valid until the next failing call on the same thread).
 *  - Parameter structs carry struct_size (set by the *_default_params functions). A caller
 *    built against an older header passes a smaller struct: fields it does not know keep their
 *    defaults. Always start from the default function, then change fields.
 *  - "The model's default" is spelled by leaving a field as the *_default_params function set
 *    it: CBX_DEFAULT_INT / CBX_DEFAULT_FLOAT. Every other value must be in the field's range;
 *    otherwise (negative, NaN, Inf, too large) the call fails with CBX_ERR_INVALID_ARGUMENT
 *    and cbx_last_error() names the field, its `chatterbox say` flag, the range and the value,
 *    word for word as the CLI does: "temperature (--temperature) must be in (0, 10], got -1".
 *  - A model may be used from several threads; synthesize calls on one model are serialised
 *    (a callback must not call cbx_synthesize on the model that called it).
 *  - Supported: Turbo, Nano and Multilingual GGUFs (chatterbox convert). A Multilingual model
 *    needs cbx_synth_params.language (one of cbx_model_language(m, i)); Turbo and Nano speak
 *    English only (language NULL, "" or "en" in any case).
 *  - Long text is split at sentence boundaries into chunks that fit one generation and the
 *    audio is concatenated (src/pipeline/turbo_pipeline.h).
 *  - The upstream Perth watermark is NOT applied: output audio is not watermarked.
 */
#ifndef CHATTERBOX_H
#define CHATTERBOX_H

#include <float.h>
#include <stddef.h>
#include <stdint.h>

/* CBX_API marks the functions the library exports. The library is built with hidden symbols, so
 * these are the only symbols a shared libchatterbox exports. Consumers of a shared build on
 * Windows define CBX_SHARED (the CMake package and chatterbox.pc do it for them); elsewhere a
 * consumer needs no definition. */
#ifndef CBX_API
#if defined(_WIN32) && defined(CBX_SHARED)
#ifdef CBX_BUILD
#define CBX_API __declspec(dllexport)
#else
#define CBX_API __declspec(dllimport)
#endif
#elif defined(CBX_BUILD) && (defined(__GNUC__) || defined(__clang__))
#define CBX_API __attribute__((visibility("default")))
#else
#define CBX_API
#endif
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* 2: cbx_model_prepare_voice, cbx_timings.chunks_prefix_reused (appended; struct_size keeps
 * older callers working). 3: cbx_model_save_voice_prefix / cbx_model_load_voice_prefix,
 * CBX_ERR_FILE. 4: defaults are the named sentinels CBX_DEFAULT_INT / CBX_DEFAULT_FLOAT (what
 * the *_default_params functions set); negative, zero-as-default and NaN values that version 3
 * silently took as "the default" (temperature -1, n_threads 0, max_new_tokens 0,
 * max_chunk_tokens 0, voice max_seconds 0, ...) are now CBX_ERR_INVALID_ARGUMENT; the default
 * n_threads is the CPUs the process may use (affinity, cgroup quota), not the machine's; Turbo
 * takes language "en" in any case; cbx_version; streaming (cbx_synth_params.stream
 * and its schedule, appended). 5: cbx_log_set (the library writes nothing to stderr on its
 * own any more). 6: cbx_model_params.gemm_precision and cfm_precision (appended); the environment variables
 * CBX_GEMM, CBX_FORCE_ISA, CBX_NO_AMX, CBX_VDPBF16, CBX_NO_PREPACK, CBX_STREAM_PREFETCH and
 * CBX_S3GEN_SHARED_ARENA are no longer read: GEMM precision is this parameter, the others are
 * debugging switches named CBX_DEBUG_* (README "Debugging switches"), and a bad CBX_DEBUG_*
 * value makes cbx_model_load fail with CBX_ERR_INVALID_ARGUMENT naming the variable. 7:
 * cbx_model_params.progress_callback and progress_callback_user_data (appended): load progress,
 * and a load the callback cancels returns CBX_ERR_ABORTED. */
#define CBX_API_VERSION 7

/* "Leave the field at the model's default" (set by the *_default_params functions). Values no
 * parameter can take: INT32_MIN for int32_t fields, -FLT_MAX for float fields. */
#define CBX_DEFAULT_INT INT32_MIN
#define CBX_DEFAULT_FLOAT (-FLT_MAX)

typedef enum cbx_status {
  CBX_OK = 0,
  CBX_ERR_INVALID_ARGUMENT = 1,  /* NULL pointer, bad struct_size, out-of-range parameter */
  CBX_ERR_MODEL_LOAD = 2,        /* missing / corrupt / incomplete GGUF */
  CBX_ERR_UNSUPPORTED_MODEL = 3, /* a valid model this pipeline cannot run (e.g. Multilingual) */
  CBX_ERR_TEXT = 4,              /* empty text or invalid UTF-8 */
  CBX_ERR_ABORTED = 5,           /* the abort or audio callback asked to stop */
  CBX_ERR_OUT_OF_MEMORY = 6,
  CBX_ERR_INTERNAL = 7, /* anything else; see cbx_last_error() */
  CBX_ERR_AUDIO = 8,    /* reference audio missing, unreadable, unsupported, too short or silent */
  CBX_ERR_VOICE = 9,    /* not a (readable) .voice file, or a voice the model cannot use */
  CBX_ERR_FILE = 10     /* a prompt cache file that cannot be read or written, or a file
                           that is not one (left untouched) */
} cbx_status;

typedef enum cbx_kv_type { CBX_KV_F16 = 0, CBX_KV_F32 = 1 } cbx_kv_type;

/* GEMM precision of the matrix products with many rows (T3 prompt, flow encoder, CFM, HiFT; the
 * token-by-token decode is not a GEMM). DEFAULT: from the weights, BF16 for a quantized or
 * f16/bf16 GGUF, exact F32 for an f32 GGUF. BF16: operands rounded to bf16, f32 accumulation,
 * faster where the CPU has AMX-BF16 or is an AMD Zen 4 or later (elsewhere it runs the F32
 * GEMM); F32: exact. INT8 (cfm_precision only): weights quantized per output channel, activations
 * per row, exact int32 sums (vpdpbusd on AVX-512 VNNI; elsewhere a slow scalar kernel). */
typedef enum cbx_gemm_precision {
  CBX_GEMM_DEFAULT = 0,
  CBX_GEMM_F32 = 1,
  CBX_GEMM_BF16 = 2,
  CBX_GEMM_INT8 = 3
} cbx_gemm_precision;

typedef struct cbx_model cbx_model; /* opaque */

/* Progress of cbx_model_load: progress is the fraction of the load done, in [0, 1], never
 * decreasing from one call to the next, and exactly 1 at the last call of a load that succeeds.
 * The load runs in stages (reading the GGUF, then packing the weights of T3, the flow encoder,
 * the CFM and HiFT; packing is most of the time), each reported when done with its share of the
 * weight bytes, so a load calls it a handful of times (at least twice); a quantized T3 also
 * reports each matrix it packs, the longest part of such a load. It is called on the
 * thread that called cbx_model_load, never after cbx_model_load returns. Return nonzero to go on,
 * 0 to cancel the load: cbx_model_load then frees what it loaded and returns CBX_ERR_ABORTED,
 * and cbx_last_error() says the progress callback cancelled it. */
typedef int (*cbx_progress_callback)(float progress, void* user_data);

/* Load-time parameters: the thread pool and every buffer are reserved once per model. */
typedef struct cbx_model_params {
  size_t struct_size;     /* sizeof(cbx_model_params) */
  int32_t n_threads;      /* [1, 1024]; default: the CPUs this process may use (its CPU affinity
                             and cgroup quota). More threads than CPUs run many times slower;
                             the CLI warns, the C API cannot print and does not. */
  int32_t kv_type;        /* cbx_kv_type: the T3 KV cache (default F16) */
  int32_t max_new_tokens; /* speech tokens per generation, from 1 to what the model's T3
                             positions hold (the error message gives it); default: the
                             model's (1000, ~40 s) */
  int32_t no_repack;      /* nonzero: no planar decode copies of q4_0 / q8_0 matrices (less
                             memory, e.g. ~330 MB for Turbo q8_0; slower decode; same audio) */
  int32_t gemm_precision; /* cbx_gemm_precision (default CBX_GEMM_DEFAULT); since API 6 */
  int32_t cfm_precision;  /* cbx_gemm_precision of the S3Gen CFM estimator's transformer
                             linears, the largest share of S3Gen's time. DEFAULT: INT8 for a
                             quantized or f16/bf16 GGUF where the CPU has AVX-512 VNNI (mel
                             ~36-38 dB from the f32 path, docs/quantization.md), else as
                             gemm_precision; F32 / BF16 / INT8 force one. Since API 6 */
  /* Since API 7: follows cbx_model_load (cbx_progress_callback); NULL (default): no reports. */
  cbx_progress_callback progress_callback;
  /* Since API 7: passed to progress_callback. */
  void* progress_callback_user_data;
} cbx_model_params;

/* Per-call parameters. CBX_DEFAULT_INT / CBX_DEFAULT_FLOAT = the model's default (GGUF
 * sampler.* metadata; Turbo: temperature 0.8, top_k 1000, top_p 0.95, repetition_penalty 1.2). */
typedef struct cbx_synth_params {
  size_t struct_size;       /* sizeof(cbx_synth_params) */
  uint64_t seed;            /* any value (default 0); same text + params + seed -> same samples */
  float temperature;        /* (0, 10] */
  int32_t top_k;            /* [0, 100000]; 0 disables top-k */
  float top_p;              /* (0, 1] */
  float repetition_penalty; /* (0, 10]; 1 disables */
  int32_t max_chunk_tokens; /* text tokens per chunk of long text, from 1 to what the model's T3
                               takes (the error message gives it); default: Turbo 80, MTL 150 */
  /* Multilingual only (Turbo ignores min_p, cfg_weight and exaggeration, as upstream does;
   * Multilingual ignores top_k); still checked on every model. */
  const char* language; /* language code ("fr"), case-insensitive; required for Multilingual */
  float min_p;          /* [0, 1]; default 0.05 */
  float cfg_weight;     /* T3 classifier-free guidance, [0, 100]; default 0.5 */
  float exaggeration;   /* emotion exaggeration, [0, 100]; default 0.5 */
  /* Streaming (docs/streaming.md; every model): nonzero = on_audio gets each text chunk's
   * audio in pieces while T3 is still decoding (the concatenation has the non-streamed length;
   * should_abort is honoured between pieces). The schedule, in speech tokens (25 per second);
   * CBX_DEFAULT_INT = the default. */
  int32_t stream;
  int32_t stream_first_tokens;   /* tokens before the first piece, 1 .. 10000; default 25
                                    (Multilingual 20) */
  int32_t stream_chunk_tokens;   /* tokens between later pieces, 1 .. 10000; default 60 */
  int32_t stream_context_tokens; /* generated tokens of left context S3Gen re-runs keep, 0 .. 10000,
                                    0 = all; default 40 */
  int32_t stream_prompt_tokens;  /* voice prompt tokens (from the prompt's end) S3Gen re-runs keep,
                                    0 .. 10000, 0 = all; default 100 (Multilingual 50) */
} cbx_synth_params;

/* Audio of one finished text chunk, or of one streamed piece (samples valid during the call). Return non-zero to stop
 * (cbx_synthesize then returns CBX_ERR_ABORTED). */
typedef int (*cbx_audio_callback)(const float* samples, size_t n_samples, int32_t sample_rate, void* user_data);
/* Polled between decode steps and stages; return non-zero to abort. */
typedef int (*cbx_abort_callback)(void* user_data);

typedef struct cbx_callbacks {
  size_t struct_size; /* sizeof(cbx_callbacks) */
  cbx_audio_callback on_audio;
  cbx_abort_callback should_abort;
  void* user_data;
} cbx_callbacks;

/* Wall times of the last successful cbx_synthesize on a model, in ms. */
typedef struct cbx_timings {
  size_t struct_size; /* sizeof(cbx_timings) */
  double text_ms, t3_prefill_ms, t3_decode_ms, flow_ms, cfm_ms, hift_ms, total_ms;
  int64_t n_chunks, n_text_tokens, n_speech_tokens;
  int64_t chunks_at_limit; /* chunks whose generation hit max_new_tokens without EOS */
  int64_t n_samples;
  double rtf;                   /* total_ms / audio duration */
  int64_t chunks_prefix_reused; /* Turbo chunks whose T3 voice prefix came from the cache (see
                                   cbx_model_prepare_voice); always 0 for Multilingual */
} cbx_timings;

CBX_API int32_t cbx_api_version(void);
CBX_API const char* cbx_status_string(cbx_status s);
/* Message of the last failure on this thread ("" if none). */
CBX_API const char* cbx_last_error(void);

CBX_API cbx_model_params cbx_model_default_params(void);
CBX_API cbx_synth_params cbx_synth_default_params(void);

/* params may be NULL (defaults). On failure *model is set to NULL. */
CBX_API cbx_status cbx_model_load(const char* path, const cbx_model_params* params, cbx_model** model);
CBX_API void cbx_model_free(cbx_model* model);                 /* NULL is fine */
CBX_API int32_t cbx_model_sample_rate(const cbx_model* model); /* 24000; 0 for NULL */
/* "turbo", "nano" or "mtl"; NULL for NULL. */
CBX_API const char* cbx_model_variant(const cbx_model* model);
/* The languages a model speaks, sorted codes ("ar" ... "zh"; Turbo/Nano: "en"). The strings
 * live as long as the model; cbx_model_language returns NULL for a NULL model or i out of range. */
CBX_API int32_t cbx_model_language_count(const cbx_model* model);
CBX_API const char* cbx_model_language(const cbx_model* model, int32_t i);
/* English name of a Multilingual language code ("fr" -> "French"); NULL when unknown. */
CBX_API const char* cbx_language_name(const char* code);

/* text: UTF-8. params, callbacks: may be NULL. audio/n_samples: may both be NULL when the
 * audio callback consumes the audio; otherwise *audio receives a buffer to release with
 * cbx_audio_free (NULL and 0 on failure). */
CBX_API cbx_status cbx_synthesize(cbx_model* model, const char* text, const cbx_synth_params* params, float** audio,
                                  size_t* n_samples, const cbx_callbacks* callbacks);
CBX_API void cbx_audio_free(float* audio); /* NULL is fine */

CBX_API cbx_status cbx_model_last_timings(const cbx_model* model, cbx_timings* timings);

/* ---- Voices (zero-shot cloning; src/pipeline/voice.h) ----
 * A cbx_voice holds the conditionals built from a reference recording exactly as upstream
 * prepare_conditionals does for the model's variant (Turbo: > 5 s of audio, -27 LUFS loudness
 * normalisation, 15 s / 375 prompt tokens; Multilingual: 6 s / 150), or read from a .voice file
 * (`chatterbox voice create`). A voice is immutable and may be shared by threads and models of the
 * same variant family (Turbo/Nano, or Multilingual). Creating a voice runs the model's voice
 * encoder, CAMPPlus and S3 tokenizer on its thread pool, serialised with synthesis on that model. */
typedef struct cbx_voice cbx_voice; /* opaque */

typedef struct cbx_voice_params {
  size_t struct_size;    /* sizeof(cbx_voice_params) */
  float exaggeration;    /* stored emotion_adv, [0, 100]; default: the model's (Turbo 0, MTL 0.5) */
  int32_t norm_loudness; /* Turbo: 1 = normalise to -27 LUFS as upstream (default), 0 = skip */
  float max_seconds;     /* decode at most this much of the reference, [10, 600]; default 30 */
} cbx_voice_params;

CBX_API cbx_voice_params cbx_voice_default_params(void);
/* Reference audio file (WAV/FLAC/OGG/MP3..., any rate, mono or stereo) -> voice. params may be
 * NULL. On failure *voice is NULL: CBX_ERR_AUDIO (unreadable, too short: the message gives the
 * measured and required length, silent), CBX_ERR_MODEL_LOAD (the model lacks the encoders). */
CBX_API cbx_status cbx_voice_create(cbx_model* model, const char* audio_path, const cbx_voice_params* params,
                                    cbx_voice** voice);
/* Same from an in-memory file image; name (may be NULL) appears in messages. */
CBX_API cbx_status cbx_voice_create_from_memory(cbx_model* model, const void* data, size_t size, const char* name,
                                                const cbx_voice_params* params, cbx_voice** voice);
/* .voice files: CBX_ERR_VOICE when the file is not a readable voice (or cannot be written). */
CBX_API cbx_status cbx_voice_load(const char* path, cbx_voice** voice);
CBX_API cbx_status cbx_voice_save(const cbx_voice* voice, const char* path);
CBX_API void cbx_voice_free(cbx_voice* voice); /* NULL is fine */
/* "turbo", "nano" or "mtl" (the variant whose recipe built it); NULL for NULL. */
CBX_API const char* cbx_voice_variant(const cbx_voice* voice);
/* Warnings of the build (clipping, reference cut at max_seconds, ...); strings live as long as
 * the voice; NULL when i is out of range. */
CBX_API int32_t cbx_voice_warning_count(const cbx_voice* voice);
CBX_API const char* cbx_voice_warning(const cbx_voice* voice, int32_t i);
/* cbx_synthesize with a voice (NULL = the model's built-in voice). CBX_ERR_VOICE when the model
 * cannot use the voice (other variant family, sizes). Later calls are not affected. */
CBX_API cbx_status cbx_synthesize_voice(cbx_model* model, const cbx_voice* voice, const char* text,
                                        const cbx_synth_params* params, float** audio, size_t* n_samples,
                                        const cbx_callbacks* callbacks);
/* Turbo keeps the T3 keys/values of one voice's prefix (speaker row + prompt speech tokens, which
 * do not depend on the text; ~1 s of work on 2 cores at full size) and reuses them for every later
 * request or text chunk with that voice. The first request with a voice pays for it; this computes
 * it ahead, e.g. when a server starts. voice NULL: the built-in voice. The kept prefix is replaced
 * when another voice is prepared or used. Multilingual keeps no prefix: CBX_OK, nothing done.
 * CBX_ERR_VOICE when the model cannot use the voice. */
CBX_API cbx_status cbx_model_prepare_voice(cbx_model* model, const cbx_voice* voice);
/* The same prefix on disk, for a process that starts again (the file `chatterbox say
 * --prompt-cache` uses; format in src/pipeline/prefix_cache.h; ~37 MB for the built-in voice).
 * save computes the voice's prefix if needed and writes it to path (a temporary file renamed over it;
 * a path that is the model, a device node or a FIFO is refused: CBX_ERR_FILE).
 * load keeps the prefix stored in path when the file holds this voice for these T3 weights, CPU
 * kernels and KV type (*loaded = 1: the next request with the voice skips that work, same audio);
 * *loaded = 0 when the file is absent, holds another voice or model, or is a damaged cache (save
 * then rewrites it). voice NULL: the built-in voice. CBX_ERR_FILE when path exists but is not a
 * prompt cache, or cannot be read / written; CBX_ERR_UNSUPPORTED_MODEL for Multilingual models
 * (no text-independent prefix); CBX_ERR_VOICE as cbx_model_prepare_voice. */
CBX_API cbx_status cbx_model_save_voice_prefix(cbx_model* model, const cbx_voice* voice, const char* path);
CBX_API cbx_status cbx_model_load_voice_prefix(cbx_model* model, const cbx_voice* voice, const char* path,
                                               int32_t* loaded);

/* Log messages: warnings such as a CBX_DEBUG_FORCE_ISA the CPU lacks, an optional component
 * that is missing (Japanese kanji readings without KAKASI), or a failed internal assertion just
 * before the process aborts. The library writes nothing to stderr or stdout on its own: without
 * a callback (the default) these messages are dropped. message is one line without a trailing
 * newline, valid during the call only. Process-wide; the callback may run on any thread (the
 * library's workers included), one message at a time, and must not call cbx_log_set.
 * callback NULL: drop messages again. */
typedef enum cbx_log_level { CBX_LOG_DEBUG = 0, CBX_LOG_INFO = 1, CBX_LOG_WARN = 2, CBX_LOG_ERROR = 3 } cbx_log_level;
typedef void (*cbx_log_callback)(cbx_log_level level, const char* message, void* user_data);
CBX_API void cbx_log_set(cbx_log_callback callback, void* user_data);

/* The library's version line, e.g. "0.1.0 (git 6f62432) GNU 12.2.0 Release": the project version,
 * the git commit it was built from ("-dirty" with local changes, "unknown" outside a git checkout),
 * the compiler and the build type. A static string; never NULL. */
CBX_API const char* cbx_version(void);

#ifdef __cplusplus
}
#endif

#endif /* CHATTERBOX_H */
