-- fmem-scm-1.rockspec - builds require "fmem" with luarocks, from the top
-- of the fmem source tree:
--
--   luarocks --lua-version 5.4 make bindings/lua/fmem-scm-1.rockspec
--
-- Only the Lua module is built here: libfmem and libfmem_hooks (with their
-- headers fmem.h, fmem_far.h and fmem_hooks.h) must already be installed,
-- e.g. by `make install` of this tree; if they are not under /usr or
-- /usr/local, pass FMEM_DIR=PREFIX (or FMEM_INCDIR=... FMEM_LIBDIR=...).
-- The fmem-lua host program is built by the autotools build only.
rockspec_format = "3.0"
package = "fmem"
version = "scm-1"
source = {
  url = "git+file://.", -- luarocks make builds the working tree as it is
}
description = {
  summary = "Lua 5.4 binding of fmem: far-memory pools, buffers, and Lua states whose heap is in far memory",
  detailed = [[
    require "fmem": pools (fmem.open, fmem.connect), buffers as userdata with
    byte, integer and float accessors, far-memory regions, and
    fmem.newstate(pool_or_region), a Lua state whose whole heap is allocated
    from the pool through an fmem-backed lua_Alloc.
  ]],
}
dependencies = {
  "lua >= 5.4, < 5.5",
}
external_dependencies = {
  FMEM = {
    header = "fmem_hooks.h",
    library = "fmem_hooks",
  },
}
build = {
  type = "builtin",
  modules = {
    fmem = {
      sources = {
        "bindings/lua/lfmem_util.c",
        "bindings/lua/lfmem_pool.c",
        "bindings/lua/lfmem_buffer.c",
        "bindings/lua/lfmem_region.c",
        "bindings/lua/lfmem_backing.c",
        "bindings/lua/lfmem_copy.c",
        "bindings/lua/lfmem_state.c",
        "bindings/lua/lfmem_module.c",
      },
      defines = { "_GNU_SOURCE" },
      incdirs = { "$(FMEM_INCDIR)" },
      libdirs = { "$(FMEM_LIBDIR)" },
      libraries = { "fmem_hooks", "fmem" },
    },
  },
}
