-- Under fmem-lua: this very state's heap is an fmem heap (fmem.host()).
-- Under any other interpreter fmem.host() is nil and the tests are skipped.
local fmem = require "fmem"

describe("fmem-lua host", function()
  local h = fmem.host()
  if not h then
    pending("not running under fmem-lua")
    return
  end

  it("reports a heap that holds this state", function()
    assert.truthy(h.backing == "pool" or h.backing == "region")
    assert.truthy(h.heap.remote_bytes > 0)
    assert.truthy(h.hooks.mallocs > 0)
    -- a region gives a unit pool space when it first leaves the cache
    -- (units written by a writing read-ahead have none before)
    local cached = h.region and h.region.cached_bytes or 0
    assert.truthy(h.pool.allocated_bytes + cached >= h.heap.remote_bytes)
  end)

  it("grows and shrinks with the program's garbage", function()
    collectgarbage()
    local base = fmem.host().heap.remote_bytes
    local t = {}
    for i = 1, 200000 do t[i] = {i} end
    local grown = fmem.host().heap.remote_bytes
    assert.truthy(grown > base + 4 * 1024 * 1024, ("grew %d -> %d"):format(base, grown))
    t = nil
    collectgarbage()
    collectgarbage()
    local after = fmem.host().heap.remote_bytes
    assert.truthy(after < grown, ("shrank %d -> %d"):format(grown, after))
    assert.are.equal(0, fmem.host().hooks.spills)
  end)
end)
