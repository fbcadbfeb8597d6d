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
--
-- The module is compiled and linked in one step straight into the rock's
-- library directory: nothing is written into the source tree, so no stray
-- fmem.so can shadow the build tree's (./?.so is on Lua's default cpath).
--
-- source.url: the project has no public repository yet. `luarocks make`
-- builds the working tree and never reads source.url; the URL below is a
-- placeholder under .invalid (RFC 2606, a name that can never resolve),
-- to be replaced when the repository is published. `luarocks build` or
-- `luarocks install` of this file therefore cannot fetch anything.
rockspec_format = "3.0"
package = "fmem"
version = "scm-1"
source = {
  url = "git+https://fmem.invalid/fmem.git",
}
description = {
  summary = "Lua 5.4 binding of fmem: far-memory pools, buffers, and Lua states whose heap is in far memory",
  detailed = [[
    require "fmem": pools (fmem.open, fmem.connect), buffers as userdata with
    byte, integer and float accessors, far-memory regions, and
    fmem.newstate(pool_or_region), a Lua state whose whole heap is allocated
    from the pool through an fmem-backed lua_Alloc.
  ]],
  license = "MIT",
  homepage = "https://fmem.invalid/", -- placeholder, see source.url above
  labels = { "memory", "allocator", "rdma" },
}
dependencies = {
  "lua >= 5.4, < 5.5",
}
external_dependencies = {
  FMEM = {
    library = "fmem_hooks",
  },
}
build = {
  type = "command",
  -- headers in PREFIX/include or PREFIX/include/fmem
  build_command = [[mkdir -p "$(LIBDIR)" && $(CC) $(CFLAGS) $(LIBFLAG) -std=c11 -D_GNU_SOURCE \
    -I"$(LUA_INCDIR)" -Ilibfmem -I"$(FMEM_INCDIR)" -I"$(FMEM_INCDIR)/fmem" \
    bindings/lua/lfmem_util.c bindings/lua/lfmem_pool.c bindings/lua/lfmem_buffer.c \
    bindings/lua/lfmem_region.c bindings/lua/lfmem_backing.c bindings/lua/lfmem_copy.c \
    bindings/lua/lfmem_state.c bindings/lua/lfmem_module.c \
    -L"$(FMEM_LIBDIR)" -lfmem_hooks -lfmem -o "$(LIBDIR)/fmem.so"]],
}
