// python/csrc/library.cpp — claims the `attnkit` op namespace (torch.ops.attnkit.*). Each family
// defines its schemas beside its implementation with TORCH_LIBRARY_FRAGMENT; fake (meta) shapes
// and the forward ops' autograd are registered in Python, in the module named by set_python_module.
#include <torch/csrc/autograd/autograd_not_implemented_fallback.h>
#include <torch/library.h>

TORCH_LIBRARY(attnkit, m) { (void)m; }

// The backward ops have no backward of their own (no double backward). torch's fallback passes
// them through in C++ (a Python autograd kernel cost ~20 us a call) and makes a gradient through
// them an error naming the op ("derivative for attnkit::... is not implemented"), never a silent 0.
TORCH_LIBRARY_IMPL(attnkit, Autograd, m) {
  for (const char* op : {"attention_bwd", "flex_bwd", "gdn_chunk_bwd"}) m.impl(op, torch::autograd::autogradNotImplementedFallback());
}
