"""clang_index"""
