// The baseline codec kernel table: codec_ref.h's definitions compiled for the target's default
// instruction set. Always available; used without AVX2/F16C or with WEFT_KERNEL_ISA=generic.
#include "kernels/codec_portable.h"

namespace weft::codec {

const CodecKernels& GenericCodecKernels() {
  static const CodecKernels kernels = MakePortableCodecKernels("generic");
  return kernels;
}

}  // namespace weft::codec
