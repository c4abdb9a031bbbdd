// Whether compressing an allreduce pays (src/compress/compression_pays.h), the decision
// WEFT_COMPRESSION takes per call: never on one host; on two hosts joined by a slow link (a
// topology file) above some size; not on a fast link; and `weft-topo --explain` prints it.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <string>

#include "compress/compression_pays.h"
#include "test_util.h"
#include "topo/fabric.h"
#include "topo/presets.h"
#include "weft/weft_compress.h"

namespace {

using weft::compress::CompressionDecision;
using weft::compress::DecideCompression;

weftCompression Spec(const char* text) {
  weftCompression s;
  EXPECT_EQ(weftCompressionParse(text, &s), weftSuccess) << text;
  return s;
}

std::shared_ptr<const weft::Fabric> Preset(const std::string& name) {
  weft::StatusOr<std::shared_ptr<const weft::Fabric>> f = weft::MakePreset(name, 0);
  EXPECT_TRUE(f.ok()) << f.status().message();
  return f.ok() ? *f : nullptr;
}

// A 2-host fabric with a 2 Gbit/s link between hosts, saved as a topology file and loaded
// back (what WEFT_TOPO_FILE gives a communicator).
std::shared_ptr<const weft::Fabric> SlowTwoHostFabricFromFile() {
  const std::shared_ptr<const weft::Fabric> preset = Preset("netns:2x2@2");
  if (preset == nullptr) return nullptr;
  const std::string path = "/tmp/weft_compression_pays_" + std::to_string(getpid()) + ".topo";
  const weft::Status saved = weft::SaveTopologyFile(*preset, path);
  EXPECT_TRUE(saved.ok()) << saved.message();
  weft::StatusOr<std::shared_ptr<const weft::Fabric>> loaded = weft::LoadTopologyFile(path);
  std::remove(path.c_str());
  EXPECT_TRUE(loaded.ok()) << loaded.status().message();
  return loaded.ok() ? *loaded : nullptr;
}

CompressionDecision Decide(const weft::Fabric& f, const char* spec, size_t bytes) {
  return DecideCompression(&f, f.HostGroups(), Spec(spec), bytes / 4, 4);
}

TEST(CompressionPays, NeverOnOneHost) {
  const std::shared_ptr<const weft::Fabric> f = Preset("host:4");
  ASSERT_NE(f, nullptr);
  for (const char* spec : {"int8", "sign1", "topk:0.01"})
    for (size_t bytes : {size_t{1} << 16, size_t{1} << 26, size_t{1} << 30}) {
      const CompressionDecision d = Decide(*f, spec, bytes);
      EXPECT_FALSE(d.compress) << d.why;
      EXPECT_NE(d.why.find("one host"), std::string::npos) << d.why;
    }
  // Threads of one process (no fabric), one host: no compression either.
  EXPECT_FALSE(DecideCompression(nullptr, {{0, 1, 2, 3}}, Spec("int8"), 1 << 24, 4).compress);
}

TEST(CompressionPays, WithoutAFabricSeveralHostsCompress) {
  // Thread ranks grouped into "hosts" (WEFT_INPROC_GROUPS): no model says it does not pay.
  const CompressionDecision d = DecideCompression(nullptr, {{0, 1}, {2, 3}}, Spec("int8"), 1 << 24, 4);
  EXPECT_TRUE(d.compress) << d.why;
  EXPECT_EQ(d.ranks_per_host, 2);
  // Uneven hosts take the flat placement.
  EXPECT_EQ(DecideCompression(nullptr, {{0, 1}, {2}}, Spec("int8"), 1 << 24, 4).ranks_per_host, 1);
}

TEST(CompressionPays, AboveSomeSizeOnASlowLinkBetweenHosts) {
  const std::shared_ptr<const weft::Fabric> f = SlowTwoHostFabricFromFile();
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(f->HostGroups().size(), 2u);
  for (const char* spec : {"int8", "fp8", "int4", "sign1", "topk:0.01"}) {
    const CompressionDecision small = Decide(*f, spec, 4096);
    const CompressionDecision large = Decide(*f, spec, size_t{64} << 20);
    std::printf("4 KiB: %s\n64 MiB: %s\n", small.why.c_str(), large.why.c_str());
    EXPECT_FALSE(small.compress) << small.why;
    EXPECT_TRUE(large.compress) << large.why;
    EXPECT_EQ(large.ranks_per_host, 2) << "2 x 2: full precision inside hosts";
    EXPECT_NEAR(large.tier_gbps, 0.25, 0.01) << "2 Gbit/s";
    EXPECT_NEAR(large.uncompressed_wire_us, 268435.0, 2000.0) << "the 268 ms link bound";
    // The decision flips once, at some size, and stays: it is monotone in the size.
    bool seen = false;
    for (size_t bytes = 4096; bytes <= (size_t{64} << 20); bytes *= 2) {
      const bool c = Decide(*f, spec, bytes).compress;
      EXPECT_TRUE(c || !seen) << spec << " at " << bytes << " bytes after compressing smaller";
      seen |= c;
    }
  }
  // bf16 data cast to bf16 saves nothing on the wire: never pays.
  EXPECT_FALSE(DecideCompression(f.get(), f->HostGroups(), Spec("bf16"), 1 << 24, 2).compress);
}

TEST(CompressionPays, NotWhenTheLinkIsFasterThanTheCodec) {
  // 100 Gbit/s links, capped by the machine's TCP stack (4.6 GB/s in the model): 64 MiB
  // cross in ~15 ms, while top-k (2.6 GB/s to encode) spends ~23 ms on a rank's 32 MiB.
  const std::shared_ptr<const weft::Fabric> f = Preset("netns:2x2@100");
  ASSERT_NE(f, nullptr);
  const CompressionDecision d = Decide(*f, "topk:0.01", size_t{64} << 20);
  EXPECT_FALSE(d.compress) << d.why;
  EXPECT_GT(d.codec_us, d.uncompressed_wire_us - d.compressed_wire_us) << d.why;
}

TEST(CompressionPays, WeftTopoExplainShowsTheDecision) {
  const std::string command = weft_test::BinPath("weft-topo") +
                              " --preset netns:2x2@2 --explain allreduce 64M --compress int8 2>&1";
  FILE* p = popen(command.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[4096];
  size_t got;
  while ((got = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, got);
  ASSERT_EQ(pclose(p), 0) << command << ":\n" << out;
  EXPECT_NE(out.find("Compression"), std::string::npos) << out;
  EXPECT_NE(out.find("int8: 2 host(s) x 2 rank(s)"), std::string::npos) << out;
  EXPECT_NE(out.find("-> compress"), std::string::npos) << out;
}

}  // namespace
