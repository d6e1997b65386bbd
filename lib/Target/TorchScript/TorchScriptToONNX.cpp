//===- TorchScriptToONNX.cpp - the frontend's entry point -----------------===//
//
// Turns libtorch's exceptions into messages that name the file: loading
// throws c10::Error (not a zip, not TorchScript, a version too new) or a
// torch::jit::ErrorReport (an op this libtorch does not know).
//
//===----------------------------------------------------------------------===//

#include "TorchScriptGraph.h"
#include "Translator.h"

#include <ATen/Parallel.h>
#include <torch/csrc/jit/frontend/error_report.h>

using namespace tp::torchscript;

/// libtorch's message for a file it cannot read, in the user's terms.
static std::string explainLoadError(const std::string &path,
                                    const std::string &message) {
  auto has = [&](const char *text) {
    return message.find(text) != std::string::npos;
  };
  if (has("failed finding central directory") || has("not a ZIP archive"))
    return path + ": not a TorchScript file (not a zip archive; save the "
                  "model with torch.jit.save)";
  if (has("constants.pkl"))
    return path + ": a zip archive but not TorchScript (torch.save of a "
                  "module or state dict?); save a traced or scripted module "
                  "with torch.jit.save";
  if (has("maximum supported version"))
    return path + ": written by a newer PyTorch than this libtorch reads (" +
           message.substr(0, message.find('\n')) + ")";
  return path + ": libtorch cannot load it: " +
         message.substr(0, message.find("\nException raised from"));
}

bool tp::torchscript::convertTorchScript(const std::string &path,
                                         const ConvertOptions &options,
                                         onnx::ModelProto &model,
                                         std::string &error,
                                         std::vector<std::string> *warnings) {
  try {
    at::set_num_threads(1);
    registerMissingAtenOps();
    ArchiveState archive;
    LoadedGraph loaded = [&] {
      try {
        archive = readArchiveState(path);
        return loadGraph(path, archive, options.inputs, !options.weightsOnly);
      } catch (const c10::Error &e) {
        throw ConvertError(explainLoadError(path, e.what_without_backtrace()));
      } catch (const torch::jit::ErrorReport &e) {
        throw ConvertError(explainLoadError(path, e.what()));
      }
    }();

    model.set_ir_version(8);
    model.set_producer_name("tp-import-torchscript");
    onnx::OperatorSetIdProto *opset = model.add_opset_import();
    opset->set_domain("");
    opset->set_version(kOpset);
    onnx::GraphProto *graph = model.mutable_graph();
    graph->set_name("torchscript");
    if (options.weightsOnly) {
      // The inputs by name, and every weight the graph reads.
      for (const std::string &name : loaded.inputNames)
        graph->add_input()->set_name(name);
      Translator translator(path, loaded, archive, *graph);
      for (torch::jit::Node *node : loaded.graph->nodes())
        if (node->kind() == c10::prim::GetAttr &&
            loaded.weights.count(node->output()))
          translator.tensorName(node->output());
      return true;
    }
    translateGraph(path, loaded, archive, model);
    if (warnings)
      for (const std::string &warning : loaded.warnings)
        warnings->push_back(path + ": " + warning);
    return true;
  } catch (const ConvertError &e) {
    error = e.what();
  } catch (const c10::Error &e) {
    error = path + ": " + e.what_without_backtrace();
  } catch (const std::exception &e) {
    error = path + ": " + e.what();
  }
  return false;
}
