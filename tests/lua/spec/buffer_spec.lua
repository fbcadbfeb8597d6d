-- Buffers: sizes, bytes, typed accessors, on the direct mapping and on the
-- fmem_read/fmem_write path ({map = false}).
local fmem = require "fmem"

local pool = fmem.open("mem:?size=32M")

for _, mode in ipairs({"mapped", "read/write"}) do
  local opts = mode == "read/write" and {map = false} or nil

  describe("buffer (" .. mode .. ")", function()
    it("has the asked size and lives in a 4 KiB x 2^k block", function()
      local b = pool:alloc(100, opts)
      assert.are.equal(100, #b)
      assert.are.equal(100, b:size())
      assert.are.equal(4096, b:handle().length)
      assert.are.equal(mode == "mapped", b:mapped())
      local c = pool:alloc(5000, opts)
      assert.are.equal(8192, c:handle().length)
      b:free()
      c:free()
    end)

    it("reads back what was written", function()
      local b = pool:alloc(64, opts)
      assert.are.equal(5, b:write(0, "hello"))
      b:write(59, "world")
      assert.are.equal("hello", b:read(0, 5))
      assert.are.equal("world", b:read(59, 5))
      assert.are.equal("world", b:read(59))
      assert.are.equal(64, #b:read())
      assert.are.equal("", b:read(64))
      assert.are.equal("", b:read(10, 0))
      b:write(10, "a\0b\0c")
      assert.are.equal("a\0b\0c", b:read(10, 5))
      b:free()
    end)

    it("fills ranges", function()
      local b = pool:alloc(10000, opts)
      b:fill(0x41)
      assert.are.equal(string.rep("A", 10000), b:read())
      b:fill(0x42, 100, 5)
      assert.are.equal("ABBBBBA", b:read(99, 7))
      b:free()
    end)

    it("stores integers of every width, at any alignment", function()
      local b = pool:alloc(64, opts)
      local cases = {
        {"i8", -128, 127}, {"u8", 0, 255}, {"i16", -32768, 32767}, {"u16", 0, 65535},
        {"i32", -2147483648, 2147483647}, {"u32", 0, 4294967295},
        {"i64", math.mininteger, math.maxinteger},
      }
      for _, c in ipairs(cases) do
        local name, lo, hi = c[1], c[2], c[3]
        for _, off in ipairs({0, 1, 3, 7, 33}) do
          b["set_" .. name](b, off, lo)
          assert.are.equal(lo, b["get_" .. name](b, off), name .. " low at " .. off)
          b["set_" .. name](b, off, hi)
          assert.are.equal(hi, b["get_" .. name](b, off), name .. " high at " .. off)
        end
      end
      b:set_i32(0, -2)
      assert.are.equal(4294967294, b:get_u32(0))
      assert.is_true(math.type(b:get_i64(0)) == "integer")
      b:free()
    end)

    it("stores floats", function()
      local b = pool:alloc(32, opts)
      b:set_f64(0, math.pi)
      assert.are.equal(math.pi, b:get_f64(0))
      b:set_f64(9, -1.5e300)
      assert.are.equal(-1.5e300, b:get_f64(9))
      b:set_f32(20, 0.25)
      assert.are.equal(0.25, b:get_f32(20))
      b:set_f32(20, 0.1)
      assert.is_true(math.abs(b:get_f32(20) - 0.1) < 1e-7)
      b:set_f64(0, 3)
      assert.is_true(math.type(b:get_f64(0)) == "float")
      b:free()
    end)

    it("is little endian, as the machine", function()
      local b = pool:alloc(8, opts)
      b:set_u32(0, 0x04030201)
      assert.are.equal("\1\2\3\4", b:read(0, 4))
      b:free()
    end)

    it("names its block", function()
      local b = pool:alloc(4096, opts)
      local h = b:handle()
      assert.are.equal(0, h.node)
      assert.are.equal(0, h.addr % 4096)
      assert.truthy(h.rkey)
      assert.matches("^fmem%.buffer %(4096 bytes", tostring(b))
      b:free()
      assert.are.equal("fmem.buffer (freed)", tostring(b))
    end)
  end)
end

describe("buffers and their pool", function()
  it("keep the pool alive when the pool object is dropped", function()
    local p = fmem.open("mem:?size=8M")
    local b = p:alloc(4096)
    b:write(0, "still here")
    p = nil
    collectgarbage()
    collectgarbage()
    assert.are.equal("still here", b:read(0, 10))
    b:free()
  end)

  it("stay usable after pool:close(), which stops new allocations", function()
    local p = fmem.open("mem:?size=8M")
    local b = p:alloc(100)
    p:close()
    assert.is_true(p:closed())
    b:write(0, "ok")
    assert.are.equal("ok", b:read(0, 2))
    assert.error_matches(function() p:alloc(1) end, "^fmem: alloc: the pool is closed$")
    b:free()
    p:close() -- again: nothing happens
  end)

  it("count in the pool's statistics", function()
    local p = fmem.open("mem:?size=8M")
    local before = p:stats()
    assert.are.equal(0, before.allocated_bytes)
    local b = p:alloc(20000)
    local mid = p:stats()
    assert.are.equal(32768, mid.allocated_bytes)
    assert.are.equal(before.allocs + 1, mid.allocs)
    assert.are.equal(1, mid.size_classes[4]) -- 4 KiB << 3
    b:free()
    assert.are.equal(0, p:stats().allocated_bytes)
    assert.are.equal(8 * 1024 * 1024, p:stats().capacity_bytes)
  end)

  it("module helpers", function()
    assert.are.equal(4096, fmem.size_round(1))
    assert.are.equal(8192, fmem.size_round("5K"))
    assert.are.equal(4096, fmem.CHUNK_SIZE)
    assert.matches("^%d+%.%d+$", fmem.version)
    assert.are.equal("fmem " .. fmem.version, fmem._VERSION)
    assert.are.equal("the pool has no free block of that size", fmem.strerror(-3))
    assert.are.equal("the service that issued this handle is gone; reopen the pool",
                     fmem.strerror(-14))
  end)
end)
