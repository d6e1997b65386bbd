// The translation unit that builds the precompiled header
// (PrecompiledHeaders.h).
