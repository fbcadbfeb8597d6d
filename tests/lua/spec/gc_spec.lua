-- The collector and to-be-closed variables give blocks back to the pool.
local fmem = require "fmem"

local function used(p) return p:stats().allocated_bytes end

describe("finalization", function()
  it("the collector frees dropped buffers", function()
    local p = fmem.open("mem:?size=16M")
    for _ = 1, 300 do
      local b = p:alloc(4096)
      b:write(0, "garbage")
    end
    assert.truthy(used(p) > 0)
    collectgarbage()
    collectgarbage()
    assert.are.equal(0, used(p))
  end)

  it("a churn loop never runs the pool dry", function()
    -- 16 MiB pool, 64 MiB allocated over the loop: the collector must keep up
    local p = fmem.open("mem:?size=16M")
    local ok, err = pcall(function()
      for i = 1, 1024 do
        local b = p:alloc(65536)
        b:set_i64(0, i)
        if i % 64 == 0 then collectgarbage() end
      end
    end)
    assert.is_true(ok, err)
    collectgarbage()
    assert.are.equal(0, used(p))
  end)

  it("buffer and pool dying in the same cycle, in any order", function()
    for _ = 1, 20 do
      local p = fmem.open("mem:?size=4M")
      local bufs = {}
      for i = 1, 8 do bufs[i] = p:alloc(4096) end
      p, bufs = nil, nil
      collectgarbage()
    end
    collectgarbage()
  end)

  it("<close> frees at the end of the block", function()
    local p = fmem.open("mem:?size=8M")
    do
      local b <close> = p:alloc(10000)
      b:write(0, "scoped")
      assert.are.equal(16384, used(p))
    end
    assert.are.equal(0, used(p))
  end)

  it("<close> after an explicit free is quiet", function()
    local p = fmem.open("mem:?size=8M")
    do
      local b <close> = p:alloc(100)
      b:free()
    end
    assert.are.equal(0, used(p))
  end)

  it("<close> frees when the block raises", function()
    local p = fmem.open("mem:?size=8M")
    local ok, err = pcall(function()
      local b <close> = p:alloc(100)
      b:read(200, 1)
    end)
    assert.is_false(ok)
    assert.matches("^fmem: read: range", err)
    assert.are.equal(0, used(p))
  end)

  it("<close> on a pool", function()
    local b
    do
      local p <close> = fmem.open("mem:?size=8M")
      b = p:alloc(10)
    end
    b:write(0, "x") -- the buffer holds the pool open
    b:free()
  end)
end)
