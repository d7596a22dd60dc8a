"""The TensorBoard "DeepContext" tab.

`plugin` holds the TensorBoard glue (loader, route table); every route parses
its request (`params`) and calls a pure function (`tables`, `browse`, `diff`,
`overview`, `source`) over profiles held by `store`. The browser side is a set
of hand-written ES modules under ``static/``, shipped with the package.
"""
