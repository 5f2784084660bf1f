// Starts Swagger UI on /docs (the API's docs page; no inline script, so its policy needs none). "Try it out"
// requests carry the viewer's page key from this origin's storage (set at sign-in), so a signed-in browser
// uses the API here as the viewer does: the cookie with its key, and the Origin check on every write. A bearer
// token entered with "Authorize" works as before; a cookie without the key opens nothing.
const KEY = "cubicle.key";
const mount = document.getElementById("swagger-ui");

window.ui = SwaggerUIBundle({
  url: mount.dataset.openapi,
  dom_id: "#swagger-ui",
  layout: "BaseLayout",
  deepLinking: true,
  showExtensions: true,
  showCommonExtensions: true,
  validatorUrl: null, // no badge fetched from the validator's site
  presets: [SwaggerUIBundle.presets.apis, SwaggerUIBundle.SwaggerUIStandalonePreset],
  requestInterceptor: (request) => {
    const key = localStorage.getItem(KEY);
    if (key) request.headers["X-Cubicle-Key"] = key;
    return request;
  },
});
