//===- CompileOptions.cpp - tp_mlir's compile options, from the table -----===//
//
// _tp_mlir.CompileOptions gets one property per row of
// mlir::tp::getCompileOptions(), named by its keyword and converted by the
// field's type; compile_options() returns the rows, for tp_mlir.compile's
// keywords and their tests. A choice is parsed from its name here, with
// tp-compile's message for an unknown one.
//
//===----------------------------------------------------------------------===//

#include "CompileOptions.h"

#include "tp/Driver/CompileOptions.h"

#include <nanobind/stl/string.h>

#include <type_traits>

namespace nb = nanobind;
using mlir::tp::CompileOption;
using mlir::tp::CompileOptions;

namespace {
template <typename T> struct IsOptional : std::false_type {};
template <typename T> struct IsOptional<std::optional<T>> : std::true_type {};

template <typename T> struct IsVector : std::false_type {};
template <typename T> struct IsVector<std::vector<T>> : std::true_type {};

[[noreturn]] void throwTypeError(const CompileOption &row, const char *expected,
                                 nb::handle value) {
  std::string message = std::string(row.keyword) + " must be " + expected +
                        ", got " + Py_TYPE(value.ptr())->tp_name;
  throw nb::type_error(message.c_str());
}

/// The field's value as Python has it: a choice by its name (None for the
/// nameless one), an absent optional as None, a vector as a list.
template <typename T> nb::object toPython(const T &value) {
  if constexpr (IsOptional<T>::value) {
    return value ? toPython(*value) : nb::none();
  } else if constexpr (IsVector<T>::value) {
    nb::list list;
    for (const auto &item : value)
      list.append(toPython(item));
    return list;
  } else if constexpr (std::is_enum_v<T>) {
    llvm::StringRef name = mlir::tp::stringifyChoice(value);
    return name.empty() ? nb::none() : nb::str(name.data(), name.size());
  } else {
    return nb::cast(value);
  }
}

/// `value` as the field's type, converted as int(), float() and
/// os.fspath() would; a choice from its name.
template <typename T> T fromPython(const CompileOption &row, nb::handle value) {
  if constexpr (IsOptional<T>::value) {
    if (value.is_none())
      return std::nullopt;
    return fromPython<typename T::value_type>(row, value);
  } else if constexpr (IsVector<T>::value) {
    if (nb::isinstance<nb::str>(value) || value.is_none())
      throwTypeError(row, "a list", value);
    T result;
    for (nb::handle item : value)
      result.push_back(fromPython<typename T::value_type>(row, item));
    return result;
  } else if constexpr (std::is_enum_v<T>) {
    if (!nb::isinstance<nb::str>(value))
      throwTypeError(row, "a str", value);
    std::string name = nb::cast<std::string>(value);
    if (std::optional<T> choice = mlir::tp::symbolizeChoice<T>(name))
      return *choice;
    throw tp::python::CompileError(
        "tp_mlir.compile: error: " +
        mlir::tp::getUnknownChoiceMessage(*row.flag ? row.flag : row.keyword,
                                          name, mlir::tp::getChoiceNames<T>()));
  } else if constexpr (std::is_same_v<T, std::string>) {
    nb::object path = nb::steal(PyOS_FSPath(value.ptr()));
    if (!path.is_valid())
      throw nb::python_error();
    if (!nb::isinstance<nb::str>(path))
      throwTypeError(row, "a str or path", value);
    return nb::cast<std::string>(path);
  } else if constexpr (std::is_same_v<T, bool>) {
    int truth = PyObject_IsTrue(value.ptr());
    if (truth < 0)
      throw nb::python_error();
    return truth != 0;
  } else if constexpr (std::is_integral_v<T>) {
    nb::int_ number(value);
    T result;
    if (!nb::try_cast(number, result))
      throw nb::value_error(
          (std::string(row.keyword) + " is out of range").c_str());
    return result;
  } else {
    static_assert(std::is_floating_point_v<T>, "a type without conversion");
    return nb::cast<T>(nb::float_(value));
  }
}

/// The property of `row`; None sets its default.
template <typename T>
void bindOption(nb::class_<CompileOptions> &options, const CompileOption &row,
                T CompileOptions::*member) {
  options.def_prop_rw(
      row.keyword,
      [member](const CompileOptions &self) { return toPython(self.*member); },
      [member, &row](CompileOptions &self, nb::handle value) {
        self.*member = value.is_none() ? CompileOptions().*member
                                       : fromPython<T>(row, value);
      },
      nb::for_getter(row.help), nb::for_setter(nb::arg("value").none()));
}

/// The names of a choice (std::optional<E> or E), else None.
template <typename T> nb::object getChoices() {
  if constexpr (IsOptional<T>::value) {
    return getChoices<typename T::value_type>();
  } else if constexpr (std::is_enum_v<T>) {
    nb::list names;
    for (llvm::StringRef name : mlir::tp::getChoiceNames<T>())
      if (!name.empty())
        names.append(nb::str(name.data(), name.size()));
    return names;
  } else {
    return nb::none();
  }
}

nb::list getOptionTable() {
  static constexpr const char *kinds[] = {"optional", "required", "hidden",
                                          "positional"};
  nb::list table;
  for (const CompileOption &row : mlir::tp::getCompileOptions()) {
    nb::dict entry;
    entry["flag"] = *row.flag ? nb::str(row.flag) : nb::none();
    entry["keyword"] = row.keyword;
    entry["kind"] = kinds[row.kind];
    entry["help"] = row.help;
    std::visit(
        [&](auto member) {
          using T = std::remove_reference_t<decltype(CompileOptions().*member)>;
          entry["default"] = toPython(CompileOptions().*member);
          entry["choices"] = getChoices<T>();
        },
        row.field);
    table.append(entry);
  }
  return table;
}
} // namespace

void tp::python::bindCompileOptions(nb::module_ &m) {
  nb::class_<CompileOptions> options(m, "CompileOptions");
  options.def(nb::init<>());
  for (const CompileOption &row : mlir::tp::getCompileOptions())
    std::visit([&](auto member) { bindOption(options, row, member); },
               row.field);
  // What tp_mlir.explain sets; no flags.
  options.def_rw("explain_json", &CompileOptions::explainJson)
      .def_rw("write_artifact", &CompileOptions::writeArtifact);

  m.def("compile_options", &getOptionTable,
        "tp-compile's options, one dict each: flag (None for the "
        "positional model), keyword, kind, help, default and choices.");
}
