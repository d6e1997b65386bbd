//===- CompileCommandLine.cpp - tp-compile's flags, from the table --------===//
//
// One llvm::cl option per row of getCompileOptions(), typed by its field:
// cl::opt for a value, cl::list for a vector (numbers comma separated),
// and a string for a choice, parsed into its enum once the command line is.
//
//===----------------------------------------------------------------------===//

#include "tp/Driver/CompileCommandLine.h"

#include "llvm/ADT/StringExtras.h"

#include <type_traits>

using namespace mlir;
using namespace mlir::tp;
namespace cl = llvm::cl;

struct CompileCommandLine::Flag {
  /// The --help name of a choice's value ("none|cpu|cuda"); the option
  /// refers to it.
  std::string valueName;
  std::unique_ptr<cl::Option> option;
  /// Stores the parsed value into the options.
  std::function<LogicalResult(CompileOptions &, std::string &)> apply;
};

namespace {
template <typename T> struct IsOptional : std::false_type {};
template <typename T> struct IsOptional<std::optional<T>> : std::true_type {};

template <typename T> struct IsVector : std::false_type {};
template <typename T> struct IsVector<std::vector<T>> : std::true_type {};

/// The choice named `text` into `value`, or the error naming the choices.
template <typename E>
LogicalResult parseChoice(const CompileOption &row, StringRef text, E &value,
                          std::string &error) {
  if (std::optional<E> choice = symbolizeChoice<E>(text)) {
    value = *choice;
    return success();
  }
  error = getUnknownChoiceMessage(row.flag, text, getChoiceNames<E>());
  return failure();
}

/// Makes the flag of `row`, whose field has type T.
template <typename T> class FlagMaker {
public:
  FlagMaker(const CompileOption &row, cl::OptionCategory &category,
            CompileCommandLine::Flag &flag)
      : row(row), category(category), flag(flag) {}

  void make(T CompileOptions::*member) {
    if constexpr (IsVector<T>::value)
      makeList(member);
    else if constexpr (IsOptional<T>::value)
      makeOptional(member);
    else if constexpr (std::is_enum_v<T>)
      makeChoice(member);
    else
      makeValue(member);
  }

private:
  /// The modifiers every flag has, then `mods`.
  template <typename Opt, typename... Mods>
  Opt &create(cl::NumOccurrencesFlag notRequired, const Mods &...mods) {
    bool required = row.kind == CompileOption::Required ||
                    row.kind == CompileOption::Positional;
    auto opt = std::make_unique<Opt>(
        StringRef(row.flag), cl::desc(row.help), cl::cat(category),
        cl::value_desc(flag.valueName.empty() ? StringRef(row.valueName)
                                              : StringRef(flag.valueName)),
        required ? cl::Required : notRequired,
        row.kind == CompileOption::Hidden ? cl::Hidden : cl::NotHidden,
        row.kind == CompileOption::Positional ? cl::Positional
                                              : cl::NormalFormatting,
        mods...);
    Opt &result = *opt;
    flag.option = std::move(opt);
    return result;
  }

  /// Names the value in --help by the choices (none|cpu|cuda), unless the
  /// table names it.
  template <typename E> void nameChoices() {
    if (*row.valueName)
      return;
    SmallVector<StringRef> names;
    for (StringRef name : getChoiceNames<E>())
      if (!name.empty())
        names.push_back(name);
    flag.valueName = llvm::join(names, "|");
  }

  void makeValue(T CompileOptions::*member) {
    auto &opt =
        create<cl::opt<T>>(cl::Optional, cl::init(CompileOptions().*member));
    flag.apply = [&opt, member](CompileOptions &options, std::string &) {
      options.*member = opt.getValue();
      return success();
    };
  }

  void makeChoice(T CompileOptions::*member) {
    nameChoices<T>();
    auto &opt = create<cl::opt<std::string>>(
        cl::Optional,
        cl::init(stringifyChoice(CompileOptions().*member).str()));
    const CompileOption &row = this->row;
    flag.apply = [&opt, &row, member](CompileOptions &options,
                                      std::string &error) {
      return parseChoice(row, opt.getValue(), options.*member, error);
    };
  }

  /// Given or not: a choice (std::optional<E>) or a value.
  void makeOptional(T CompileOptions::*member) {
    using Value = typename T::value_type;
    const CompileOption &row = this->row;
    if constexpr (std::is_enum_v<Value>) {
      nameChoices<Value>();
      auto &opt = create<cl::opt<std::string>>(cl::Optional);
      flag.apply = [&opt, &row, member](CompileOptions &options,
                                        std::string &error) {
        if (!opt.getNumOccurrences())
          return success();
        Value value;
        if (failed(parseChoice(row, opt.getValue(), value, error)))
          return failure();
        options.*member = value;
        return success();
      };
    } else {
      auto &opt = create<cl::opt<Value>>(cl::Optional);
      flag.apply = [&opt, member](CompileOptions &options, std::string &) {
        if (opt.getNumOccurrences())
          options.*member = opt.getValue();
        return success();
      };
    }
  }

  /// Numbers comma separated (--prefill-chunks 16,64); strings repeated
  /// (--input-shape a=1x2 --input-shape b=3).
  void makeList(T CompileOptions::*member) {
    using Value = typename T::value_type;
    auto &list = create<cl::list<Value>>(cl::ZeroOrMore);
    if constexpr (std::is_arithmetic_v<Value>)
      list.setMiscFlag(cl::CommaSeparated);
    flag.apply = [&list, member](CompileOptions &options, std::string &) {
      (options.*member).assign(list.begin(), list.end());
      return success();
    };
  }

  const CompileOption &row;
  cl::OptionCategory &category;
  CompileCommandLine::Flag &flag;
};

template <typename T>
void makeFlag(const CompileOption &row, cl::OptionCategory &category,
              CompileCommandLine::Flag &flag, T CompileOptions::*member) {
  FlagMaker<T>(row, category, flag).make(member);
}
} // namespace

CompileCommandLine::CompileCommandLine(cl::OptionCategory &category) {
  for (const CompileOption &row : getCompileOptions()) {
    Flag &flag = *flags.emplace_back(std::make_unique<Flag>());
    std::visit([&](auto member) { makeFlag(row, category, flag, member); },
               row.field);
  }
}

CompileCommandLine::~CompileCommandLine() {
  for (std::unique_ptr<Flag> &flag : flags)
    flag->option->removeArgument();
}

LogicalResult CompileCommandLine::getOptions(CompileOptions &options,
                                             std::string &error) const {
  for (const std::unique_ptr<Flag> &flag : flags)
    if (failed(flag->apply(options, error)))
      return failure();
  return success();
}
