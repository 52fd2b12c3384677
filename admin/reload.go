package admin

import "net/http"

// reload re-reads the configuration in this process, as SIGHUP does. A
// file with problems changes nothing and answers 422 with every problem.
func (a *Admin) reload(w http.ResponseWriter, r *http.Request, who string) {
	a.logAction(r, who, "reload", "")
	if err := a.opts.Reload("admin " + who); err != nil {
		writeError(w, http.StatusUnprocessableEntity, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"reloaded": true})
}
