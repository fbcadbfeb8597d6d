-- Misuse raises a Lua error whose message starts with "fmem: " and never
-- touches memory: bounds, use after free, bad sizes, wrong types.
local fmem = require "fmem"

local pool = fmem.open("mem:?size=16M")

-- fn(...) raises a message matching pattern (checked on the whole message:
-- busted's error_matches would trim "chunk:line:" prefixes)
local function raises(pattern, fn, ...)
  local ok, err = pcall(fn, ...)
  assert.is_false(ok, "expected an error matching " .. pattern)
  assert.matches(pattern, err)
end

describe("errors", function()
  it("out-of-range offsets", function()
    local b = pool:alloc(100)
    raises("^fmem: read: range %[96, 96%+8%) outside the buffer of 100 bytes$", b.read, b, 96, 8)
    raises("^fmem: read: range", b.read, b, 101)
    raises("^fmem: write: range %[99, 99%+2%)", b.write, b, 99, "ab")
    raises("^fmem: get_i64: range %[93, 93%+8%)", b.get_i64, b, 93)
    raises("^fmem: set_u8: range %[100, 100%+1%)", b.set_u8, b, 100, 1)
    raises("^fmem: get_f64: range", b.get_f64, b, math.maxinteger)
    raises("^fmem: read: range", b.read, b, 50, math.maxinteger)
    raises("^fmem: fill: range", b.fill, b, 0, 90, 11)
    raises("^fmem: read: offset must not be negative, got %-1$", b.read, b, -1, 1)
    raises("^fmem: get_i8: offset must not be negative", b.get_i8, b, -1)
    raises("^fmem: read: length must not be negative", b.read, b, 0, -5)
    raises("^fmem: get_u16: offset must be a whole number, got 1.5$", b.get_u16, b, 1.5)
    raises("^fmem: get_u16: offset must be an integer, got string$", b.get_u16, b, "1")
    raises("^fmem: get_u16: offset expected$", b.get_u16, b)
    -- the edges themselves are fine
    b:set_u8(99, 7)
    assert.are.equal(7, b:get_u8(99))
    assert.are.equal(8, #b:read(92, 8))
    b:free()
  end)

  it("use after free", function()
    local b = pool:alloc(64)
    b:free()
    assert.is_true(b:freed())
    raises("^fmem: free: buffer already freed$", b.free, b)
    raises("^fmem: read: buffer already freed$", b.read, b, 0, 1)
    raises("^fmem: write: buffer already freed$", b.write, b, 0, "x")
    raises("^fmem: get_i32: buffer already freed$", b.get_i32, b, 0)
    raises("^fmem: set_f64: buffer already freed$", b.set_f64, b, 0, 1.0)
    raises("^fmem: fill: buffer already freed$", b.fill, b, 0)
    raises("^fmem: handle: buffer already freed$", b.handle, b)
    raises("^fmem: len: buffer already freed$", function() return #b end)
    assert.are.equal("fmem.buffer (freed)", tostring(b))
  end)

  it("bad sizes", function()
    raises("^fmem: alloc: size must not be negative, got %-1$", pool.alloc, pool, -1)
    raises("^fmem: alloc: size must be at least 1 byte$", pool.alloc, pool, 0)
    raises("^fmem: alloc: size must be a whole number, got 2.5$", pool.alloc, pool, 2.5)
    raises("^fmem: alloc: size must be an integer, got string$", pool.alloc, pool, "10")
    raises("^fmem: alloc: size expected$", pool.alloc, pool)
    raises("^fmem: alloc: size is zero or larger than the pool allows$", pool.alloc, pool,
           1 << 40)
    local small = fmem.open("mem:?size=4M")
    local held = {}
    raises("^fmem: alloc: the pool has no free block of that size$", function()
      for i = 1, 2000 do held[i] = small:alloc(4096) end
    end)
    for _, b in ipairs(held) do b:free() end
    assert.are.equal(0, small:stats().allocated_bytes)
  end)

  it("wrong argument types", function()
    local b = pool:alloc(16)
    raises("^fmem: write: bad argument #2 %(string expected, got number%)$", b.write, b, 0, 42)
    raises("^fmem: set_i32: value must be an integer, got string$", b.set_i32, b, 0, "1")
    raises("^fmem: set_i32: value must be an integer, got 1.5$", b.set_i32, b, 0, 1.5)
    raises("^fmem: set_f32: value must be a number, got no value$", b.set_f32, b, 0)
    raises("^fmem: set_u8: value 256 out of range for u8 %(0%.%.255%)$", b.set_u8, b, 0, 256)
    raises("^fmem: set_i8: value %-129 out of range for i8", b.set_i8, b, 0, -129)
    raises("^fmem: set_u32: value %-1 out of range for u32", b.set_u32, b, 0, -1)
    raises("^fmem: fill: byte must be in 0%.%.255, got 300$", b.fill, b, 300)
    -- methods called on the wrong object
    raises("^fmem: read: bad argument #1 %(fmem.buffer expected, got fmem.pool%)$", b.read, pool)
    raises("^fmem: alloc: bad argument #1 %(fmem.pool expected, got fmem.buffer%)$",
           pool.alloc, b, 1)
    raises("^fmem: alloc: bad argument #1 %(fmem.pool expected, got number%)$", pool.alloc, 5, 1)
    raises("^fmem: alloc: options must be a table, got string$", pool.alloc, pool, 1, "x")
    raises("^fmem: newstate: bad argument #1 %(fmem.pool or fmem.region expected, got string%)$",
           fmem.newstate, "x")
    raises("^fmem: newstate: bad argument #1 %(fmem.pool or fmem.region expected, got fmem.buffer",
           fmem.newstate, b)
    raises("^fmem: region: option pool must be an fmem.pool, got number$", fmem.region, "1M",
           {pool = 1})
    raises("^fmem: region: size expected$", fmem.region)
    raises("^fmem: region: size: bad size 'lots'", fmem.region, "lots")
    raises("^fmem: region: cache: bad percentage '0%%'", fmem.region, "1M", {cache = "0%"})
    assert.are.equal("fmem: the metatable is protected", getmetatable(b))
    b:free()
  end)

  it("bad pool URIs and services", function()
    raises("^fmem: open: cannot parse the pool URI 'bogus:': 'bogus:': unknown scheme", fmem.open,
           "bogus:")
    raises("^fmem: open: cannot parse the pool URI 'mem:%?siz=1': unknown parameter 'siz'$",
           fmem.open, "mem:?siz=1")
    raises("^fmem: open: bad argument #1 %(URI string expected, got number%)$", fmem.open, 1)
    raises("^fmem: connect: 'mem:' is not a service URI", fmem.connect, "mem:")
    raises("^fmem: connect: unix:/nonexistent/fmemd%.sock: ", fmem.connect,
           "unix:/nonexistent/fmemd.sock")
  end)

  it("closed pools", function()
    local p = fmem.open("mem:?size=4M")
    p:close()
    raises("^fmem: stats: the pool is closed$", p.stats, p)
    raises("^fmem: newstate: the pool is closed$", fmem.newstate, p)
    assert.are.equal("fmem.pool (closed)", tostring(p))
  end)
end)
