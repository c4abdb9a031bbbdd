/*
 * weft — compression on the wire (extension to weft.h).
 *
 * Codecs that shrink float32/bfloat16 payloads (casts, fp8 and integer block quantization,
 * top-k sparsification, 1-bit sign), the collectives that use them, and caller-owned error
 * feedback. The exact semantics and worst-case error of every codec are defined in
 * kernels/codec_ref.h (shipped with the sources); in short, per element x of a block of
 * `block` values whose largest magnitude is absmax:
 *
 *   weftCodecBf16     2 B/elem   |err| <= 2^-8 |x|
 *   weftCodecFp16     2 B/elem   |err| <= 2^-11 |x| in fp16's normal range (|x| >= 65520: inf)
 *   weftCodecFp8E4M3  1 B/elem + 4 B/block  |err| <= 2^-4 |x| + 2^-18 absmax (+ float slack)
 *   weftCodecFp8E5M2  1 B/elem + 4 B/block  |err| <= 2^-3 |x| + 2^-30 absmax
 *   weftCodecInt8     1 B/elem + 4 B/block  |err| <= absmax / 254   (stochastic: / 127)
 *   weftCodecInt4     0.5 B/elem + 4 B/block  |err| <= absmax / 14  (stochastic: / 7)
 *   weftCodecSign1    1 bit/elem + 4 B/block  |err| <= absmax (x' = +-mean|x| of the block)
 *   weftCodecTopK     8 B per kept element (k = max(1, round(ratio * count))); kept elements
 *                     exact, dropped ones become 0
 *
 * NaN/inf: casts keep them element-wise; a block codec turns a whole block holding NaN/inf
 * into NaN (never into finite values); top-k keeps them (they rank highest).
 *
 * Every compressed collective runs as a schedule with encode and decode steps that weft's
 * checker proves (the generators algorithms/..._compressed*.cc): every contribution quantized
 * once, decoded and reduced in float32 at its owner, every rank decoding the same bytes. Host
 * buffers only. On two or more hosts where some host holds more than one rank (even or
 * uneven), the allreduce sums in float32 inside each host, encodes each host's sum of a slice
 * once, reduces the decoded sums in float32 at the slice's owner, encodes that once, gathers
 * it across hosts and forwards those encodings inside the host, where every rank decodes them;
 * contributions cross hosts only encoded. Calls of 8 MiB and more run in up to 4 pipelined pieces. No
 * sub-communicators are made.
 *
 * Streams: with a weft host stream the call checks its arguments, queues on the stream and
 * returns; it runs after the stream's earlier work and before its later work, and its error
 * (if any) sticks to the stream (weftStreamSynchronize/Query), as for any queued collective.
 * The buffers and the residual must stay valid until then. With NULL it runs to completion.
 */
#ifndef WEFT_WEFT_COMPRESS_H_
#define WEFT_WEFT_COMPRESS_H_

#include "weft/weft.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  weftCodecNone = 0, /* not a codec: rejected by every call */
  weftCodecBf16 = 1,
  weftCodecFp16 = 2,
  weftCodecFp8E4M3 = 3,
  weftCodecFp8E5M2 = 4,
  weftCodecInt8 = 5,
  weftCodecInt4 = 6,
  weftCodecTopK = 7,
  weftCodecSign1 = 8,
  weftNumCodecs = 9
} weftCodec_t;

/** flags: stochastic rounding (int8/int4), seeded by `seed` (and the rank, in collectives). */
#define WEFT_COMPRESS_STOCHASTIC 0x1u
/** flags: randomized Hadamard rotation of each block before quantizing (fp8/int8/int4/sign1;
 *  block must be a power of two <= 65536). Seeded by `seed`; every rank must pass the same. */
#define WEFT_COMPRESS_HADAMARD 0x2u
/** flags: placement (allreduce): compress every transfer, inside hosts too, instead of keeping
 *  full precision inside each host and compressing only between hosts (the default where the
 *  communicator spans several hosts with the same rank count each). For comparisons. */
#define WEFT_COMPRESS_FLAT 0x4u
#define WEFT_COMPRESS_DEFAULT_BLOCK 128
#define WEFT_COMPRESS_MAX_BLOCK 65536

/** A compression spec. Every rank of a collective must pass the same values. */
typedef struct {
  weftCodec_t codec;
  uint32_t block; /* values per scale (block codecs); must be >= 1 for every codec */
  float ratio;    /* top-k: fraction of elements kept, in (0, 1]; ignored otherwise */
  uint64_t seed;  /* stochastic rounding and Hadamard signs */
  uint32_t flags; /* WEFT_COMPRESS_* */
} weftCompression;

/** Fills *spec with codec, block 128, ratio 0.01, seed 0, no flags. */
WEFT_API weftResult_t weftCompressionDefault(weftCodec_t codec, weftCompression* spec);
/**
 * Parses "NAME[:OPTION,...]" into *spec (defaults as weftCompressionDefault). NAME: bf16,
 * fp16, fp8 (= fp8e4m3), fp8e4m3, fp8e5m2, int8, int4, sign1 (or 1bit), topk. OPTION:
 * block=N, ratio=R, seed=S, stochastic, hadamard, flat; "topk:0.01" is short for topk:ratio=0.01.
 * Example: "int4:block=64,hadamard". The result is validated as the collectives would.
 */
WEFT_API weftResult_t weftCompressionParse(const char* text, weftCompression* spec);
/** Short name of a codec ("int8"), or "unknown". */
WEFT_API const char* weftCodecName(weftCodec_t codec);
/** Bytes that count float32 values encode to under spec (exact; depends on nothing else). */
WEFT_API weftResult_t weftCompressedSize(const weftCompression* spec, size_t count, size_t* bytes);
/** Encodes count float32 values into dst (weftCompressedSize bytes). stream_id varies the
 *  stochastic-rounding stream (collectives pass the rank). */
WEFT_API weftResult_t weftEncode(const weftCompression* spec, const float* src, size_t count,
                                 void* dst, uint64_t stream_id);
/** Decodes what weftEncode wrote for count values. */
WEFT_API weftResult_t weftDecode(const weftCompression* spec, const void* src, size_t count,
                                 float* dst);

/*
 * Compressed collectives. datatype: weftFloat32 or weftBfloat16; op: weftSum or weftAvg.
 * Results are reduced in float32 (bf16 outputs rounded once at the end).
 *
 * residual (error feedback, may be NULL): float32, one buffer per call site, zero it before
 * the first call and pass the same buffer every time. Before encoding, residual is added to
 * this rank's input; afterwards it holds what encoding dropped from that input and, on the
 * slice this rank owns (allreduce), what re-encoding the reduced slice dropped (times nranks
 * for weftAvg), so the next call sends it. Elements in blocks that decoded to NaN/inf get 0.
 */

/** allreduce: every rank receives bitwise-identical results. residual: count floats.
 *  Flat placement (one host, uneven hosts, or WEFT_COMPRESS_FLAT): each rank's contribution is
 *  encoded once, reduced in float32 in rank order at the owner of each of nranks slices, the
 *  reduced slice encoded once and all-gathered; every rank (the owner too) decodes the same
 *  bytes (one rank: its contribution is the result, encoded once). Hierarchical placement
 *  (several hosts): the contribution encoded is the host's
 *  float32 sum of the slice a rank owns inside its host; the residual then carries what was
 *  dropped from that slice (the rest of it is added to the input and zeroed), so the sum of
 *  all ranks' residuals is still what the call dropped. */
WEFT_API weftResult_t weftAllReduceCompressed(const void* sendbuff, void* recvbuff, size_t count,
                                              weftDataType_t datatype, weftRedOp_t op,
                                              const weftCompression* spec, float* residual,
                                              weftComm_t comm, weftStream_t stream);
/** reduce-scatter: sendbuff nranks*recvcount, rank r gets the reduced slice r (decoded
 *  contributions reduced in float32 in rank order; not re-encoded). residual: nranks*recvcount. */
WEFT_API weftResult_t weftReduceScatterCompressed(const void* sendbuff, void* recvbuff,
                                                  size_t recvcount, weftDataType_t datatype,
                                                  weftRedOp_t op, const weftCompression* spec,
                                                  float* residual, weftComm_t comm,
                                                  weftStream_t stream);
/** allgather: every rank (the sender too) decodes the same encoded blocks, so all ranks hold
 *  identical bits. residual: sendcount floats. */
WEFT_API weftResult_t weftAllGatherCompressed(const void* sendbuff, void* recvbuff,
                                              size_t sendcount, weftDataType_t datatype,
                                              const weftCompression* spec, float* residual,
                                              weftComm_t comm, weftStream_t stream);
/** all-to-all with each block encoded on its own (e.g. fp8 dispatch of MoE tokens with one
 *  scale per 128 channels). No error feedback (tokens are not accumulated). */
WEFT_API weftResult_t weftAllToAllCompressed(const void* sendbuff, void* recvbuff, size_t count,
                                             weftDataType_t datatype,
                                             const weftCompression* spec, weftComm_t comm,
                                             weftStream_t stream);
/** all-to-all-v: counts and displacements in elements, as weftAllToAllv. */
WEFT_API weftResult_t weftAllToAllvCompressed(const void* sendbuff, const size_t* sendcounts,
                                              const size_t* sdispls, void* recvbuff,
                                              const size_t* recvcounts, const size_t* rdispls,
                                              weftDataType_t datatype,
                                              const weftCompression* spec, weftComm_t comm,
                                              weftStream_t stream);

#ifdef __cplusplus
}
#endif

#endif /* WEFT_WEFT_COMPRESS_H_ */
