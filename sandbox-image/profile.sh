# Login shells in the sandbox: a plain prompt-free environment rooted at /workspace.
export PATH="$HOME/.local/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
export PAGER=cat GIT_PAGER=cat TERM=dumb
