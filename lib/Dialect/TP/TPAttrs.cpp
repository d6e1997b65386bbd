//===- TPAttrs.cpp - attributes of the tp dialect -------------------------===//
//
// `#tp.layout`: its assembly, its context-free checks, and the accessors
// that read and write it on function arguments.
//
//===----------------------------------------------------------------------===//

#include "tp/Dialect/TP/TPDialect.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/SmallSet.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace mlir::tp;

#include "tp/Dialect/TP/TPEnums.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "tp/Dialect/TP/TPAttrs.cpp.inc"

void TPDialect::registerAttributes() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "tp/Dialect/TP/TPAttrs.cpp.inc"
      >();
}

//===----------------------------------------------------------------------===//
// LayoutAttr
//===----------------------------------------------------------------------===//

/// `[a, b]`
static ParseResult parsePair(AsmParser &parser,
                             SmallVectorImpl<int64_t> &pair) {
  return parser.parseCommaSeparatedList(AsmParser::Delimiter::Square, [&] {
    return parser.parseInteger(pair.emplace_back());
  });
}

/// `<role = R, dim = D [, block = B] [, slice = [o, s]] [, padded = [V, P]]
/// [, repeat = [H, R]]>`
Attribute LayoutAttr::parse(AsmParser &parser, Type) {
  std::optional<SplitRole> role;
  std::optional<int64_t> dim;
  int64_t block = -1;
  SmallVector<int64_t> slice, padded, repeat;
  llvm::SmallSet<StringRef, 6> seen;
  auto parseEntry = [&]() -> ParseResult {
    StringRef key;
    SMLoc loc = parser.getCurrentLocation();
    if (parser.parseKeyword(&key) || parser.parseEqual())
      return failure();
    if (!seen.insert(key).second)
      return parser.emitError(loc) << "'" << key << "' appears twice";
    if (key == "role") {
      StringRef name;
      SMLoc nameLoc = parser.getCurrentLocation();
      if (parser.parseKeyword(&name))
        return failure();
      role = symbolizeSplitRole(name);
      if (!role)
        return parser.emitError(nameLoc)
               << "unknown split role '" << name << "'";
      return success();
    }
    if (key == "dim")
      return parser.parseInteger(dim.emplace());
    if (key == "block")
      return parser.parseInteger(block);
    if (key == "slice")
      return parsePair(parser, slice);
    if (key == "padded")
      return parsePair(parser, padded);
    if (key == "repeat")
      return parsePair(parser, repeat);
    return parser.emitError(loc)
           << "unknown key '" << key
           << "' (expected role, dim, block, slice, padded or repeat)";
  };
  SMLoc loc = parser.getCurrentLocation();
  if (parser.parseCommaSeparatedList(AsmParser::Delimiter::LessGreater,
                                     parseEntry))
    return {};
  if (!role || !dim) {
    parser.emitError(loc) << "#tp.layout needs a role and a dim";
    return {};
  }
  return parser.getChecked<LayoutAttr>(loc, parser.getContext(), *role, *dim,
                                       block, slice, padded, repeat);
}

void LayoutAttr::print(AsmPrinter &printer) const {
  printer << "<role = " << stringifySplitRole(getRole())
          << ", dim = " << getDim();
  if (getBlock() >= 0)
    printer << ", block = " << getBlock();
  auto printPair = [&](StringRef key, ArrayRef<int64_t> pair) {
    if (pair.empty())
      return;
    printer << ", " << key << " = [";
    llvm::interleaveComma(pair, printer);
    printer << "]";
  };
  printPair("slice", getSlice());
  printPair("padded", getPadded());
  printPair("repeat", getRepeat());
  printer << ">";
}

LogicalResult LayoutAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                 SplitRole role, int64_t dim, int64_t block,
                                 ArrayRef<int64_t> slice,
                                 ArrayRef<int64_t> padded,
                                 ArrayRef<int64_t> repeat) {
  if (dim < 0)
    return emitError() << "#tp.layout dim must be non-negative, got " << dim;
  if (block < -1)
    return emitError() << "#tp.layout block must be -1 (none) or "
                          "non-negative, got "
                       << block;
  if (!slice.empty() && (slice.size() != 2 || slice[0] < 0 || slice[1] <= 0))
    return emitError() << "#tp.layout slice must be [offset, size] with "
                          "offset >= 0 and size > 0";
  if (!padded.empty() &&
      (padded.size() != 2 || padded[0] <= 0 || padded[1] < padded[0]))
    return emitError() << "#tp.layout padded must be [V, P] with 0 < V <= P";
  if (!padded.empty() && role == SplitRole::Replicated)
    return emitError() << "#tp.layout of a replicated weight cannot be "
                          "padded";
  if (!padded.empty() && !slice.empty() && padded[0] != slice[1])
    return emitError() << "#tp.layout padded = [" << padded[0] << ", "
                       << padded[1] << "] must pad the slice's " << slice[1]
                       << " rows";
  if (!repeat.empty() &&
      (repeat.size() != 2 || repeat[0] <= 0 || repeat[1] < 2))
    return emitError() << "#tp.layout repeat must be [H, R] with H > 0 and "
                          "R > 1";
  if (!repeat.empty() && !padded.empty())
    return emitError() << "#tp.layout cannot both pad and repeat";
  if (!repeat.empty() && !slice.empty() && slice[1] % repeat[0] != 0)
    return emitError() << "#tp.layout repeat = [" << repeat[0] << ", "
                       << repeat[1] << "] needs the slice's " << slice[1]
                       << " rows in " << repeat[0] << " equal blocks";
  return success();
}

LayoutAttr LayoutAttr::withSplit(SplitRole role, int64_t dim,
                                 int64_t block) const {
  return LayoutAttr::get(getContext(), role, dim, block, getSlice(),
                         getPadded(), getRepeat());
}

LayoutAttr LayoutAttr::withPadding(int64_t unpadded, int64_t padded) const {
  return LayoutAttr::get(getContext(), getRole(), getDim(), getBlock(),
                         getSlice(), {unpadded, padded});
}

//===----------------------------------------------------------------------===//
// Accessors
//===----------------------------------------------------------------------===//

LayoutAttr mlir::tp::getLayout(FunctionOpInterface func, unsigned index) {
  return func.getArgAttrOfType<LayoutAttr>(index, TPDialect::kLayoutAttrName);
}

LayoutAttr mlir::tp::getLayout(Value value) {
  if (auto arg = dyn_cast<BlockArgument>(value)) {
    auto func =
        dyn_cast_or_null<FunctionOpInterface>(arg.getOwner()->getParentOp());
    if (!func || arg.getOwner() != &func.getFunctionBody().front())
      return {};
    return getLayout(func, arg.getArgNumber());
  }
  Operation *def = value.getDefiningOp();
  return def ? def->getAttrOfType<LayoutAttr>(TPDialect::kLayoutAttrName)
             : LayoutAttr();
}

void mlir::tp::setLayout(FunctionOpInterface func, unsigned index,
                         LayoutAttr layout) {
  func.setArgAttr(index, TPDialect::kLayoutAttrName, layout);
}

std::string mlir::tp::getPieceName(StringRef name, LayoutAttr layout,
                                   int64_t rank) {
  if (!layout || (!layout.isPiece() && !layout.isRepeated()))
    return name.str();
  // A repeated range is another tensor than the range itself: its own
  // name (`w[:, 0:64]*2`, `w*2`).
  std::string times =
      layout.isRepeated() ? "*" + std::to_string(layout.getRepeatTimes()) : "";
  if (!layout.isPiece())
    return name.str() + times;
  std::string text = name.str() + "[";
  for (int64_t d = 0; d < rank; ++d) {
    if (d)
      text += ", ";
    if (d != layout.getDim()) {
      text += ":";
      continue;
    }
    text += std::to_string(layout.getSliceOffset()) + ":" +
            std::to_string(layout.getSliceOffset() + layout.getSliceSize());
  }
  return text + "]" + times;
}
