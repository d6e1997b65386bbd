//===- Trace.cpp - a timeline of each rank's forward passes and collectives
//===//

#include "tp/Runtime/Trace.h"

#include "tp/Runtime/RankContext.h"

#include <chrono>
#include <cstdio>
#include <fstream>

using namespace tp::rt;

double tp::rt::traceMicros() {
  return std::chrono::duration<double, std::micro>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

/// `text` as a JSON string literal.
static std::string quoted(const std::string &text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char escape[8];
      std::snprintf(escape, sizeof(escape), "\\u%04x", c);
      out += escape;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

void tp::rt::writeChromeTrace(const std::string &path,
                              const std::vector<RankTrace> &ranks) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out)
    throw Error("cannot write the trace '" + path + "'");
  out << "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n";
  bool first = true;
  auto separate = [&] {
    if (!first)
      out << ",\n";
    first = false;
  };
  char number[64];
  for (const RankTrace &rank : ranks) {
    separate();
    out << "{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 0, \"tid\": "
        << rank.rank << ", \"args\": {\"name\": \"rank " << rank.rank << "\"}}";
    for (const TraceEvent &event : rank.events) {
      separate();
      out << "{\"name\": " << quoted(event.name)
          << ", \"ph\": \"X\", \"pid\": 0, \"tid\": " << rank.rank;
      std::snprintf(number, sizeof(number), "%.3f", event.startMicros);
      out << ", \"ts\": " << number;
      std::snprintf(number, sizeof(number), "%.3f",
                    event.endMicros - event.startMicros);
      out << ", \"dur\": " << number;
      if (!event.site.empty())
        out << ", \"args\": {\"site\": " << quoted(event.site)
            << ", \"bytes\": " << event.bytes << "}";
      out << "}";
    }
  }
  out << "\n]}\n";
  out.flush();
  if (!out)
    throw Error("cannot write the trace '" + path + "'");
}
