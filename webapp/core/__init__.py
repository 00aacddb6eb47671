"""Project plumbing shared by the apps: job dispatch, middleware, static finders."""
