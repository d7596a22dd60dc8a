"""The TensorBoard "DeepContext" tab.

`plugin` holds the TensorBoard glue (loader, route table); every route parses
its request (`params`) and calls a pure function (`tables`, `browse`, `diff`,
`overview`, `source`; `spread` and `windows` over merged profiles) over
profiles held by `store` (`merged` caches the merged ones; `shape` holds the
whole-tree numpy passes a first request on a big profile needs). The browser
side is a set of hand-written ES modules under ``static/``, shipped with the
package.
"""
