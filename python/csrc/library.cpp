// python/csrc/library.cpp — claims the `attnkit` op namespace (torch.ops.attnkit.*). Each family
// defines its schemas beside its implementation with TORCH_LIBRARY_FRAGMENT; fake (meta) shapes
// and autograd are registered in Python, in the module named by set_python_module.
#include <torch/library.h>

TORCH_LIBRARY(attnkit, m) { (void)m; }
