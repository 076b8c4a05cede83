-- pandoc Lua filter: docs/configuration.md -> numatgt.yaml(5). tools/build-deb.sh runs
--   pandoc -f gfm -t man -s --lua-filter tools/deb/yaml-man.lua docs/configuration.md
-- so the man page is made from the reference itself and cannot drift from it.
--
-- What it changes, for a terminal and for `man --warnings` (lintian):
-- - the page's own title (the first level-1 heading) gives way to NAME, SYNOPSIS and
--   DESCRIPTION; the text before the first `##` heading is the DESCRIPTION;
-- - `##` headings become sections (.SH), deeper ones subsections (.SS);
-- - tables (field | type | default | meaning) become tagged paragraphs: the first cell is
--   the tag, every other cell a line "column: text" of one paragraph (wide tables do not fit 80 columns);
-- - links inside the tree (#anchors, ../paths) keep their text only; web links stay;
-- - a SEE ALSO section ends the page.

local function cell_inlines(cell)
  local out = pandoc.List()
  for i, block in ipairs(cell.contents) do
    if i > 1 then
      out:insert(pandoc.Space())
    end
    if block.content then
      out:extend(block.content)
    else
      out:insert(pandoc.Str(pandoc.utils.stringify(block)))
    end
  end
  return out
end

local function rows_of(tbl)
  local rows = pandoc.List()
  for _, body in ipairs(tbl.bodies) do
    rows:extend(body.body)
  end
  return rows
end

function Table(tbl)
  local headers = {}
  if #tbl.head.rows > 0 then
    for j, cell in ipairs(tbl.head.rows[1].cells) do
      headers[j] = pandoc.utils.stringify(cell.contents)
    end
  end
  local items = pandoc.List()
  for _, row in ipairs(rows_of(tbl)) do
    local term = cell_inlines(row.cells[1])
    local lines = pandoc.List()
    for j = 2, #row.cells do
      local text = cell_inlines(row.cells[j])
      if #text > 0 then
        if #lines > 0 then
          lines:insert(pandoc.RawInline("man", "\n.br\n"))
        end
        if headers[j] and headers[j] ~= "" then
          lines:insert(pandoc.Emph({ pandoc.Str(headers[j] .. ":") }))
          lines:insert(pandoc.Space())
        end
        lines:extend(text)
      end
    end
    items:insert({ term, { { pandoc.Para(lines) } } })
  end
  return pandoc.DefinitionList(items)
end

function Link(link)
  if link.target:match("^https?://") then
    return nil
  end
  return link.content
end

function Pandoc(doc)
  local blocks = pandoc.List()
  blocks:insert(pandoc.Header(1, "NAME"))
  blocks:insert(pandoc.Para({ pandoc.Str("numatgt.yaml - configuration file of numatgtd, the numatgt iSCSI target") }))
  blocks:insert(pandoc.Header(1, "SYNOPSIS"))
  blocks:insert(pandoc.Para({ pandoc.Strong({ pandoc.Str("/etc/numatgt/numatgt.yaml") }) }))
  blocks:insert(pandoc.Header(1, "DESCRIPTION"))
  local title_seen = false
  for _, block in ipairs(doc.blocks) do
    if block.t == "Header" and block.level == 1 and not title_seen then
      title_seen = true
    elseif block.t == "Header" then
      block.level = math.max(1, block.level - 1)
      blocks:insert(block)
    else
      blocks:insert(block)
    end
  end
  blocks:insert(pandoc.Header(1, "SEE ALSO"))
  local refs = { "numatgtd(8)", "numatgtadm(8)", "tgtadm(8)", "tgt-admin(8)", "targets.conf(5)" }
  local see = pandoc.List()
  for i, ref in ipairs(refs) do
    local name, section = ref:match("^(.-)(%(%d%))$")
    if i > 1 then
      see:insert(pandoc.Str(","))
      see:insert(pandoc.Space())
    end
    see:insert(pandoc.Strong({ pandoc.Str(name) }))
    see:insert(pandoc.Str(section))
  end
  blocks:insert(pandoc.Para(see))
  return pandoc.Pandoc(blocks, doc.meta)
end
