// Read by prism.js as it starts (it must be imported first): Prism highlights only when asked, never the page
// by itself, and never answers a worker's messages. highlight.js asks it only to tokenize.
globalThis.Prism = { manual: true, disableWorkerMessageHandler: true };
