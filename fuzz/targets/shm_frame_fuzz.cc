// Fuzz target: the shared-memory transport's message stream between two ranks, driven
// through its public interface with fuzzed sequences of sends and recvs whose channels,
// tags and sizes need not match (ranks calling different collectives). This reaches the
// receive side's header handling (demultiplexing by channel, stash, tag/size mismatch,
// ring wrap-around, single-copy path) with every header a real sender can write. Headers a
// sender could NOT write (bad magic, absurd sizes from a corrupt or hostile peer) need the
// decoding to be callable on its own: see fuzz/README.md for the proposed extraction.
//
// Promise checked: a recv that completes successfully holds exactly the bytes of the
// message it matched (the k-th send on its channel); a failed one names the peer's rank;
// tearing down with requests still pending neither crashes nor hangs.
// Input: repeated {op u8 (bit 0: direction, bit 1: send or recv), channel u8, tag u8,
// size u16 (x 8 bytes when op bit 2 is set, to cross the ring size and the single-copy
// threshold)}.
#include <deque>
#include <map>
#include <vector>

#include "fuzz_common.h"
#include "loopback_job.h"
#include "transports/shm/shm_transport.h"

namespace {

struct Op {
  bool send;
  int from;  // sending rank (a recv is posted on the other rank)
  int channel;
  uint64_t tag;
  size_t bytes;
  weft::TransportRequest req;
  std::vector<unsigned char> buf;
};

weft_fuzz::LoopbackJob& Job() {
  static weft_fuzz::LoopbackJob* job = new weft_fuzz::LoopbackJob();
  return *job;
}

unsigned char Pattern(size_t op_index, size_t i) { return static_cast<unsigned char>(op_index * 131 + i * 7 + 1); }

void CreatePair(std::unique_ptr<weft::ShmTransport> t[2]) {
  weft::ShmOptions options;
  options.ring_bytes_per_peer = 4096;    // small: fuzzed sizes wrap the ring often
  options.slice_bytes = 1024;
  options.initial_window_bytes = 4096;
  options.single_copy_min_bytes = 8192;  // reachable by fuzzed sizes
  options.spin_us = 0;
  options.yield_us = 0;
  std::vector<int> local = {0, 1};
  Job().Together(
      [&](weft::Bootstrap* bs) {
        auto r = weft::ShmTransport::Create(bs, local, options);
        if (r.ok()) t[0] = std::move(*r);
      },
      [&](weft::Bootstrap* bs) {
        auto r = weft::ShmTransport::Create(bs, local, options);
        if (r.ok()) t[1] = std::move(*r);
      });
  FuzzCheck(t[0] && t[1], "shm transport creation failed");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  weft_fuzz::Bytes in(data, size);
  std::deque<Op> ops;  // deque: requests must not move once posted
  while (in.left() >= 5 && ops.size() < 64) {
    uint8_t code = in.U8();
    Op& op = ops.emplace_back();
    op.send = (code & 2) != 0;
    op.from = code & 1;
    op.channel = in.U8() % 4;
    op.tag = in.U8() % 4;
    uint32_t raw = in.U8() | static_cast<uint32_t>(in.U8()) << 8;
    op.bytes = (code & 4) ? raw * 8 % 40000 : raw % 2048;
  }
  std::unique_ptr<weft::ShmTransport> t[2];
  CreatePair(t);

  // Which send each recv matches: the k-th recv of (direction, channel) gets the k-th send.
  std::map<std::pair<int, int>, std::deque<size_t>> sends_of;
  for (size_t i = 0; i < ops.size(); ++i) {
    Op& op = ops[i];
    op.buf.resize(op.bytes);
    int poster = op.send ? op.from : 1 - op.from;
    int peer = 1 - poster;
    weft::Status st;
    if (op.send) {
      for (size_t b = 0; b < op.bytes; ++b) op.buf[b] = Pattern(i, b);
      sends_of[{op.from, op.channel}].push_back(i);
      st = t[poster]->PostSend(peer, op.channel, op.tag, op.buf.data(), op.bytes, &op.req);
    } else {
      st = t[poster]->PostRecv(peer, op.channel, op.tag, op.buf.data(), op.bytes, &op.req);
    }
    FuzzCheck(st.ok(), "posting on a healthy transport failed");
    (void)t[0]->Progress(0);
    (void)t[1]->Progress(0);
  }
  for (int round = 0; round < 2000 && (t[0]->HasPending() || t[1]->HasPending()); ++round) {
    bool a = t[0]->Progress(0).ok(), b = t[1]->Progress(0).ok();
    if (!a || !b) break;
  }
  // Check what completed against the send it matched.
  std::map<std::pair<int, int>, size_t> recvs_seen;
  for (size_t i = 0; i < ops.size(); ++i) {
    Op& op = ops[i];
    if (op.send) continue;
    size_t k = recvs_seen[{op.from, op.channel}]++;
    if (!op.req.done.load()) continue;
    if (!op.req.status.ok()) {
      FuzzCheck(op.req.status.message().find("rank") != std::string::npos, "recv error does not name the peer");
      continue;
    }
    const auto& sends = sends_of[{op.from, op.channel}];
    FuzzCheck(k < sends.size(), "a recv completed without a matching send");
    const Op& s = ops[sends[k]];
    FuzzCheck(s.tag == op.tag && s.bytes == op.bytes, "a recv completed with another tag or size");
    FuzzCheck(s.buf == op.buf, "a recv completed with other bytes than its send");
  }
  t[0].reset();  // teardown with requests pending: must neither crash nor hang
  t[1].reset();
  return 0;
}
