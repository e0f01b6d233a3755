// examples/aoti_runner.cpp — runs a model that torch.export + AOTInductor packaged into a .pt2,
// from C++ with no Python, where the model calls attnkit ops (torch.ops.attnkit.*).
//
//   attnkit-aoti-run MODEL.pt2 INPUTS.pt OUTPUTS.pt
//
// INPUTS.pt holds a tuple (or list) of tensors written by Python's torch.save; they are moved to
// the device the package was compiled for. OUTPUTS.pt receives the outputs, on the CPU, as a tuple
// that torch.load reads. The attnkit ops reach the package's proxy executor through torch's
// dispatcher: this program links libattnkit_torch, whose loading registers them.
#include <torch/csrc/inductor/aoti_package/model_package_loader.h>
#include <torch/csrc/jit/serialization/pickle.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace {

std::vector<char> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::vector<at::Tensor> tensors_of(const c10::IValue& v, const std::string& path) {
  std::vector<at::Tensor> out;
  if (v.isTuple()) {
    for (const auto& e : v.toTupleRef().elements()) out.push_back(e.toTensor());
  } else if (v.isList()) {
    for (const auto& e : v.toListRef()) out.push_back(e.toTensor());
  } else if (v.isTensor()) {
    out.push_back(v.toTensor());
  } else {
    throw std::runtime_error(path + ": expected a tensor, or a tuple or list of tensors (torch.save)");
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s MODEL.pt2 INPUTS.pt OUTPUTS.pt\n", argv[0]);
    return 2;
  }
  try {
    torch::inductor::AOTIModelPackageLoader loader(argv[1]);
    const auto metadata = loader.get_metadata();
    const auto key = metadata.find("AOTI_DEVICE_KEY");
    const c10::Device device(key == metadata.end() ? std::string("cpu") : key->second);

    std::vector<at::Tensor> inputs = tensors_of(torch::jit::pickle_load(read_file(argv[2])), argv[2]);
    for (auto& t : inputs) t = t.to(device);
    std::vector<at::Tensor> outputs = loader.run(inputs);

    std::vector<c10::IValue> on_cpu;  // a tuple of tensors: torch.load(weights_only=True) reads it
    for (const auto& t : outputs) on_cpu.emplace_back(t.cpu());
    const std::vector<char> bytes = torch::jit::pickle_save(c10::ivalue::Tuple::create(std::move(on_cpu)));
    std::ofstream(argv[3], std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    std::printf("ran %s on %s: %zu inputs -> %zu outputs", argv[1], device.str().c_str(), inputs.size(),
                outputs.size());
    for (const auto& t : outputs) std::printf(" %s", c10::str(t.sizes()).c_str());
    std::printf("\n");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "attnkit-aoti-run: %s\n", e.what());
    return 1;
  }
  return 0;
}
