//===- TensorParallelConfig.cpp - split rules from a JSON file ------------===//
//
// strategy=config: the idea of tensor_parallel's slicing configs. Rules
// (regex on weight names → split dim, or "replicate") override the
// automatic plan. A rule that matches nothing, or asks for a split the
// device count does not divide, is an error that names the rule.
//
//===----------------------------------------------------------------------===//

#include "tp/Transforms/TensorParallelPlan.h"

#include "tp/Dialect/TP/TPDialect.h"

#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Regex.h"

using namespace mlir;
using namespace mlir::tp;

namespace {

struct Rule {
  std::string pattern;
  std::optional<int64_t> dim; // nullopt: replicate
};

FailureOr<SmallVector<Rule>> readRules(StringRef path, Location loc) {
  auto buffer = llvm::MemoryBuffer::getFile(path);
  if (!buffer)
    return emitError(loc) << "cannot read config file '" << path
                          << "': " << buffer.getError().message();
  llvm::Expected<llvm::json::Value> json =
      llvm::json::parse((*buffer)->getBuffer());
  if (!json)
    return emitError(loc) << "config file '" << path << "' is not valid JSON: "
                          << llvm::toString(json.takeError());
  const llvm::json::Object *root = json->getAsObject();
  const llvm::json::Array *rules = root ? root->getArray("rules") : nullptr;
  if (!rules)
    return emitError(loc) << "config file '" << path
                          << "' must be an object with a \"rules\" array";
  SmallVector<Rule> result;
  for (auto [i, value] : llvm::enumerate(*rules)) {
    const llvm::json::Object *rule = value.getAsObject();
    std::optional<StringRef> pattern =
        rule ? rule->getString("pattern") : std::nullopt;
    const llvm::json::Value *split = rule ? rule->get("split") : nullptr;
    Rule r;
    if (pattern)
      r.pattern = pattern->str();
    if (split && split->getAsInteger())
      r.dim = *split->getAsInteger();
    bool replicate =
        split && split->getAsString() && *split->getAsString() == "replicate";
    if (!pattern || !split || (!r.dim && !replicate) || (r.dim && *r.dim < 0))
      return emitError(loc) << "config file '" << path << "': rule " << i
                            << " must be {\"pattern\": \"<regex>\", "
                               "\"split\": <dim> or \"replicate\"}";
    std::string error;
    if (!llvm::Regex(r.pattern).isValid(error))
      return emitError(loc)
             << "config file '" << path << "': rule " << i
             << " has an invalid pattern '" << r.pattern << "': " << error;
    result.push_back(std::move(r));
  }
  return result;
}

} // namespace

LogicalResult mlir::tp::applyConfigRules(func::FuncOp func, StringRef path,
                                         int64_t devices,
                                         TensorParallelPlan &plan) {
  FailureOr<SmallVector<Rule>> rules = readRules(path, func.getLoc());
  if (failed(rules))
    return failure();
  SmallVector<bool> used(rules->size(), false);
  for (BlockArgument arg : func.getArguments()) {
    auto name = func.getArgAttrOfType<StringAttr>(arg.getArgNumber(),
                                                  TPDialect::kWeightAttrName);
    if (!name)
      continue;
    // The first rule whose pattern matches the whole name wins.
    for (auto [i, rule] : llvm::enumerate(*rules)) {
      if (!llvm::Regex("^(" + rule.pattern + ")$").match(name.getValue()))
        continue;
      used[i] = true;
      if (!rule.dim) {
        plan.splits.erase(arg);
        break;
      }
      auto type = cast<RankedTensorType>(arg.getType());
      if (*rule.dim >= type.getRank() ||
          type.getDimSize(*rule.dim) % devices != 0)
        return emitError(arg.getLoc())
               << "config rule " << i << " ('" << rule.pattern
               << "') splits weight '" << name.getValue() << "' " << type
               << " on dim " << *rule.dim << ", which "
               << (*rule.dim >= type.getRank()
                       ? "it does not have"
                       : "does not divide by " + std::to_string(devices) +
                             " devices");
      LayoutAttr layout = getLayout(func, arg.getArgNumber());
      if (layout && layout.isPiece() && layout.getDim() != *rule.dim)
        return emitError(arg.getLoc())
               << "config rule " << i << " ('" << rule.pattern
               << "') splits weight '" << name.getValue() << "' on dim "
               << *rule.dim << ", but this piece of it is cut on dim "
               << layout.getDim() << " and can only split there";
      plan.splits[arg] = {*rule.dim, SplitRole::Config, -1};
      break;
    }
  }
  for (auto [i, rule] : llvm::enumerate(*rules))
    if (!used[i])
      return emitError(func.getLoc())
             << "config rule " << i << " ('" << rule.pattern
             << "') matches no weight of @" << func.getName();
  return success();
}
